// FICC console: the little the pages need beyond htmx. No build, no framework.
"use strict";
(function () {
  function status(text) { document.getElementById("console-status").textContent = text || ""; }
  function alert(text) { document.getElementById("console-alert").textContent = text || ""; }

  // An action's answer names what happened (HX-Trigger "ficc-changed"): say it politely.
  document.body.addEventListener("ficc-changed", function (event) {
    alert("");
    status(event.detail && event.detail.value ? String(event.detail.value) : "Done.");
  });

  // A refused action answers with the API's error envelope: show its message as an alert.
  function showError(xhr) {
    var message = "The request failed (" + xhr.status + ").";
    try {
      var body = JSON.parse(xhr.responseText);
      if (body && body.error && body.error.message) { message = body.error.message; }
    } catch (ignored) { /* not JSON: keep the status line */ }
    status("");
    alert(message);
  }
  document.body.addEventListener("htmx:responseError", function (event) { showError(event.detail.xhr); });
  document.body.addEventListener("htmx:sendError", function () { alert("The cluster cannot be reached."); });

  // Password sign-in posts JSON to the API's own session route, then opens the console.
  var login = document.getElementById("login-form");
  if (login) {
    login.addEventListener("submit", function (event) {
      event.preventDefault();
      var body = JSON.stringify({
        username: login.elements.username.value,
        password: login.elements.password.value,
      });
      fetch("/api/v1/session", { method: "POST", headers: { "Content-Type": "application/json" }, body: body, credentials: "same-origin" })
        .then(function (response) {
          if (response.ok) { window.location.assign(login.dataset.next || "/ui"); return null; }
          return response.json().then(function (data) {
            alert(data && data.error ? data.error.message : "Sign-in failed.");
          });
        })
        .catch(function () { alert("The cluster cannot be reached."); });
    });
  }
})();
