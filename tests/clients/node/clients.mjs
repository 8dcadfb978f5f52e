// The official OpenAI Node client against one of FICC's compatible base URLs.
//
// Usage: node clients.mjs '<json>' with {scenario, base_url, api_key, args}. Each scenario
// prints one JSON line with what the client got, so the test compares it with what FICC
// answered. "abort" prints a line once it has aborted its stream and then waits until stdin
// closes: the test looks at the grant while this client is still running.
import OpenAI from "openai";

const { scenario, base_url: baseURL, api_key: apiKey, args } = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

function print(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

async function collect(stream) {
  const items = [];
  for await (const item of stream) {
    items.push(item);
  }
  return items;
}

const scenarios = {
  async chat() {
    print(await client.chat.completions.create(args));
  },
  async stream() {
    const stream = await client.chat.completions.create({
      ...args,
      stream: true,
      stream_options: { include_usage: true },
    });
    print({ chunks: await collect(stream) });
  },
  async abort() {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { ...args, stream: true },
      { signal: controller.signal },
    );
    const seen = [];
    let ended = "the stream ended by itself";
    try {
      // Aborted at the first chunk; the client then ends the iteration quietly.
      for await (const chunk of stream) {
        seen.push(chunk);
        controller.abort();
        ended = "aborted";
      }
    } catch (error) {
      ended = `${ended}, then ${error.constructor.name}`;
    }
    print({ chunks: seen, ended });
    await new Promise((resolve) => {
      process.stdin.on("end", resolve);
      process.stdin.resume();
    });
  },
  async responses() {
    const response = await client.responses.create(args);
    print({ response, output_text: response.output_text });
  },
  async responses_stream() {
    const stream = await client.responses.create({ ...args, stream: true });
    print({ events: await collect(stream) });
  },
  async embeddings() {
    print(await client.embeddings.create(args));
  },
};

try {
  await scenarios[scenario]();
} catch (error) {
  print({ error: { name: error.constructor.name, status: error.status ?? null, message: String(error.message) } });
  process.exitCode = 1;
}
