// What tests/e2e/test_genai_js.py runs: the official @google/genai client (pinned in
// package.json) against the gateway's Interactions API, as an app would call it.
// `node genai_js_interactions.mjs BASE_URL KEY MODEL` creates an interaction, streams
// one, continues the first with previous_interaction_id, gets and deletes it, runs a
// function call and its function_result turn, and prints one JSON object with what
// each returned, the errors a missing interaction and a bad request raised, and the
// paths the SDK requested (its default API version, seen from the wire).
import { GoogleGenAI } from '@google/genai'

const [baseUrl, apiKey, model] = process.argv.slice(2)
const paths = []
const realFetch = globalThis.fetch
globalThis.fetch = async (input, init) => {
  const url = new URL(typeof input === 'string' ? input : input.url)
  paths.push(`${(init && init.method) || input.method || 'GET'} ${url.pathname}`)
  return realFetch(input, init)
}

const ai = new GoogleGenAI({ apiKey, httpOptions: { baseUrl } })
const config = { temperature: 0, max_output_tokens: 24 }

const first = await ai.interactions.create({ model, input: 'Say hello.', generation_config: config })

const events = []
const stream = await ai.interactions.create({
  model,
  input: 'Count to three.',
  generation_config: config,
  stream: true
})
for await (const event of stream) {
  events.push(event)
}

const continued = await ai.interactions.create({
  model,
  input: 'And again.',
  previous_interaction_id: first.id,
  generation_config: config
})
const got = await ai.interactions.get(first.id)
const deleted = await ai.interactions.delete(first.id)

async function failure (call) {
  try {
    await call()
    return null
  } catch (error) {
    return { name: error.name, status: error.status ?? error.statusCode, message: error.message }
  }
}
const missing = await failure(() => ai.interactions.get(first.id))
const refused = await failure(() =>
  ai.interactions.create({ model, input: 'hi', tools: [{ type: 'google_search' }] })
)

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }
}
const called = await ai.interactions.create({
  model,
  input: 'What is the weather in Oslo? Use the tool.',
  tools: [weather],
  generation_config: { ...config, max_output_tokens: 128, tool_choice: 'any' }
})
const call = (called.steps || []).find((step) => step.type === 'function_call')
const answered = call
  ? await ai.interactions.create({
    model,
    previous_interaction_id: called.id,
    input: [{ type: 'function_result', call_id: call.id, name: call.name, result: 'sunny' }],
    tools: [weather],
    generation_config: config
  })
  : null

console.log(
  JSON.stringify({
    first,
    events,
    continued,
    got,
    deleted: deleted === undefined ? 'undefined' : deleted,
    missing,
    refused,
    called,
    answered,
    paths
  })
)
