// What tests/e2e/test_ollama_js.py runs: the official ollama-js client (pinned in
// package.json) against the gateway. `node ollama_js_embeddings.mjs HOST MODEL` calls
// embeddings() (POST /api/embeddings) and embed() (POST /api/embed) as an app would and
// prints one JSON object with what each returned, and the error a bad request raised.
import { Ollama } from 'ollama'

const [host, model] = process.argv.slice(2)
const client = new Ollama({ host })

const single = await client.embeddings({ model, prompt: 'a lighthouse' })
const batch = await client.embed({ model, input: ['a lighthouse', 'a harbour'] })
const one = await client.embed({ model, input: 'a lighthouse' })
const empty = await client.embeddings({ model, prompt: '' })
let refused = null
try {
  await client.embeddings({ model: '', prompt: 'a lighthouse' })
} catch (error) {
  refused = { name: error.name, error: error.error, status: error.status_code }
}
console.log(JSON.stringify({ single, batch, one, empty, refused }))
