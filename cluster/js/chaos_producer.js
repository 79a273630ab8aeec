// KafkaJS producers for `minibroker chaos leader-kill|run --client kafkajs` (cluster/chaos_clients.py).
//
// How this works
// --------------
// Started by the chaos runner as `node chaos_producer.js BOOTSTRAP TOPIC PRODUCERS IDEMPOTENT LOG` (LOG, where
// its stderr goes, only names the run on its command line), it opens
// PRODUCERS KafkaJS producers (acks=all; idempotent unless IDEMPOTENT is "false") and speaks JSON lines:
//
//   stdin   {"op": "send", "producer": i, "id": n, "partition": p, "values": ["p0-1", ...]}
//           {"op": "close"}
//   stdout  {"event": "ready"}                                   every producer connected
//           {"event": "result", "producer": i, "id": n, "offset": o, "error": null | "Name: message"}
//           {"event": "closed", "stats": {...}}                  after close: every send settled
//
// A producer lingers 5 ms (as linger.ms=5 elsewhere in the runner): the groups that arrive meanwhile go
// out in ONE `send()` whose messages name their partitions, so one send() spans partitions led by
// different brokers, as a keyed application's sends do. When it resolves, each group's offset is its
// partition's `baseOffset` in the answer plus the group's place among that partition's messages; a
// partition the resolved answer does not name gets offset -1, and is counted (`resolved_without_answer`):
// KafkaJS 2.2.4 keeps the answers of a send() per broker across its retries, so after a leader moves to a
// broker that had already answered, the moved partition's messages are never sent and send() resolves
// anyway. The runner's verdict decides, from the brokers' own journals, what was really acknowledged.
'use strict'

const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, producerCount, idempotentArg] = process.argv.slice(2)
const idempotent = idempotentArg !== 'false'
const LINGER_MS = 5
const stats = { produce_requests: 0, metadata_requests: 0, retries: 0, resolved_without_answer: 0 }

function say(message) {
  process.stdout.write(JSON.stringify(message) + '\n')
}

// KafkaJS logs each retry of a send() as an error ("Failed to send messages: ..."): counted, not printed.
const logCreator = () => ({ namespace, level, log }) => {
  if (level === logLevel.ERROR && /Failed to send messages/.test(log.message)) stats.retries += 1
  else if (level <= logLevel.WARN) process.stderr.write(`${namespace}: ${log.message}\n`)
}

const kafka = new Kafka({
  clientId: 'chaos-kafkajs',
  brokers: bootstrap.split(','),
  logLevel: logLevel.WARN,
  logCreator,
  connectionTimeout: 3000,
  requestTimeout: 30000,
})

// "KafkaJSProtocolError[OUT_OF_ORDER_SEQUENCE_NUMBER]: ...": the runner counts errors by what precedes ':'.
function errorName(e) {
  return `${e.name || 'Error'}${e.type ? `[${e.type}]` : ''}: ${e.message}`
}

class LingeringProducer {
  constructor(index) {
    this.index = index
    this.producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : 5 })
    this.pending = []
    this.timer = null
    this.inFlight = new Set()
    const { REQUEST } = this.producer.events
    this.producer.on(REQUEST, ({ payload }) => {
      if (payload.apiName === 'Produce') stats.produce_requests += 1
      else if (payload.apiName === 'Metadata') stats.metadata_requests += 1
    })
  }

  add(group) {
    this.pending.push(group)
    if (this.timer === null) this.timer = setTimeout(() => this.flush(), LINGER_MS)
  }

  flush() {
    this.timer = null
    const groups = this.pending
    this.pending = []
    if (groups.length === 0) return
    const messages = []
    for (const g of groups) for (const value of g.values) messages.push({ partition: g.partition, value })
    const sent = this.producer
      .send({ topic, acks: -1, timeout: 30000, messages })
      .then(metadata => this.resolved(groups, metadata), e => this.rejected(groups, e))
      .finally(() => this.inFlight.delete(sent))
    this.inFlight.add(sent)
  }

  resolved(groups, metadata) {
    const base = new Map(metadata.map(m => [m.partition, Number(m.baseOffset)]))
    const seen = new Map() // messages of a partition before this group's, in this send()
    for (const g of groups) {
      const before = seen.get(g.partition) || 0
      seen.set(g.partition, before + g.values.length)
      const known = base.has(g.partition) && base.get(g.partition) >= 0
      if (!known) stats.resolved_without_answer += g.values.length
      say({ event: 'result', producer: this.index, id: g.id, offset: known ? base.get(g.partition) + before : -1, error: null })
    }
  }

  rejected(groups, e) {
    for (const g of groups) say({ event: 'result', producer: this.index, id: g.id, offset: -1, error: errorName(e) })
  }

  async close() {
    if (this.timer !== null) {
      clearTimeout(this.timer)
      this.flush()
    }
    while (this.inFlight.size) await Promise.allSettled(Array.from(this.inFlight))
    await this.producer.disconnect()
  }
}

async function main() {
  const producers = []
  for (let i = 0; i < Number(producerCount); i++) producers.push(new LingeringProducer(i))
  await Promise.all(producers.map(p => p.producer.connect()))
  say({ event: 'ready' })
  const lines = readline.createInterface({ input: process.stdin })
  for await (const line of lines) {
    if (!line.trim()) continue
    const command = JSON.parse(line)
    if (command.op === 'send') producers[command.producer].add(command)
    else if (command.op === 'close') break
  }
  await Promise.all(producers.map(p => p.close()))
  say({ event: 'closed', stats })
  process.exit(0)
}

main().catch(e => {
  say({ event: 'fatal', error: errorName(e) })
  process.exit(1)
})
