// An accessibility check for the FICC console, run in the page: the serious WCAG 2.1 A/AA
// failures an automated check can decide. Returns a list of {rule, target, detail}.
() => {
  const problems = [];
  const report = (rule, element, detail) => problems.push({
    rule, detail: detail || "",
    target: element ? (element.id ? "#" + element.id : element.tagName.toLowerCase() + " " + (element.textContent || "").trim().slice(0, 60)) : "",
  });
  const visible = (el) => {
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    return style.visibility !== "hidden" && style.display !== "none" && box.width > 0 && box.height > 0;
  };
  const textOf = (id) => { const el = document.getElementById(id); return el ? el.textContent.trim() : ""; };
  const nameOf = (el) => {
    if (el.getAttribute("aria-label")) return el.getAttribute("aria-label").trim();
    const labelledby = el.getAttribute("aria-labelledby");
    if (labelledby) return labelledby.split(/\s+/).map(textOf).join(" ").trim();
    if (el.id) {
      const label = document.querySelector(`label[for="${CSS.escape(el.id)}"]`);
      if (label && label.textContent.trim()) return label.textContent.trim();
    }
    const wrapping = el.closest("label");
    if (wrapping && wrapping.textContent.trim()) return wrapping.textContent.trim();
    if (["BUTTON", "A", "SUMMARY"].includes(el.tagName)) return el.textContent.trim();
    return (el.getAttribute("title") || "").trim();
  };

  // Document: language, title, landmarks.
  if (!document.documentElement.lang) report("html-lang", document.documentElement);
  if (!document.title.trim()) report("document-title", null);
  if (document.querySelectorAll("main").length !== 1) report("one-main-landmark", null, String(document.querySelectorAll("main").length));
  if (!document.querySelector("header")) report("banner-landmark", null);
  if (!document.querySelector("h1")) report("page-has-heading", null);
  document.querySelectorAll("nav").forEach((nav, i, all) => {
    if (all.length > 1 && !nameOf(nav)) report("nav-has-name", nav);
  });
  const ids = new Map();
  document.querySelectorAll("[id]").forEach((el) => ids.set(el.id, (ids.get(el.id) || 0) + 1));
  ids.forEach((count, id) => { if (count > 1) report("duplicate-id", document.getElementById(id), id); });

  // Names: every control, button, link, progress bar and meter.
  document.querySelectorAll("input:not([type=hidden]), select, textarea").forEach((el) => { if (!nameOf(el)) report("control-has-label", el); });
  document.querySelectorAll("button, a[href]").forEach((el) => { if (visible(el) && !nameOf(el)) report("has-accessible-name", el); });
  document.querySelectorAll("progress, meter").forEach((el) => { if (!nameOf(el)) report("bar-has-name", el); });
  document.querySelectorAll("img").forEach((el) => { if (!el.hasAttribute("alt")) report("image-alt", el); });
  document.querySelectorAll("fieldset").forEach((el) => { if (!el.querySelector("legend")) report("fieldset-legend", el); });

  // Tables: a caption and header cells with a scope.
  document.querySelectorAll("table").forEach((table) => {
    if (!table.querySelector("caption") || !table.querySelector("caption").textContent.trim()) report("table-caption", table);
    table.querySelectorAll("th").forEach((th) => { if (!th.getAttribute("scope")) report("th-scope", th); });
  });

  // Contrast: every visible text node's colour against the nearest opaque background (AA).
  const parse = (value) => { const m = value.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number); return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 }; };
  const luminance = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = (el) => { for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; } return { r: 255, g: 255, b: 255, a: 1 }; };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const checked = new Set();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.textContent.trim() || !el || checked.has(el) || !visible(el)) continue;
    checked.add(el);
    const style = getComputedStyle(el);
    const fg = parse(style.color); if (!fg) continue;
    const bg = background(el);
    const l1 = luminance(fg), l2 = luminance(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const large = size >= 24 || (bold && size >= 18.66);
    if (ratio < (large ? 3 : 4.5)) report("color-contrast", el, ratio.toFixed(2));
  }
  return problems;
}
