// KafkaJS's admin client deleting records and groups through a Kafka listener, as a user's script would
// (tests/integration/test_kafka_clients.py runs it). Prints one JSON line of what the client saw.
//   node tests/js/admin_deletes.js BOOTSTRAP TOPIC GROUP
// KafkaJS comes from cluster/js, the one place the project's npm packages are pinned and installed
// (scripts/setup.sh runs npm ci there).
const path = require('path')
const { Kafka, logLevel } = require(
  require.resolve('kafkajs', { paths: [path.join(__dirname, '..', '..', 'cluster', 'js')] })
)

const [bootstrap, topic, group] = process.argv.slice(2)

async function errorsOf(promise) {
  try {
    await promise
    return []
  } catch (wrapped) {
    const e = wrapped.cause || wrapped // the retrier wraps what the broker's answer raised
    return (e.groups || e.partitions || [e]).map(entry => (entry.error || entry).type || (entry.error || entry).name)
  }
}

async function main() {
  const kafka = new Kafka({
    clientId: 'minibroker-test',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 3 },
  })
  const admin = kafka.admin()
  await admin.connect()
  try {
    await admin.setOffsets({ groupId: group, topic, partitions: [{ partition: 0, offset: '2' }] })
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '3' }] })
    const offsets = await admin.fetchTopicOffsets(topic)
    const beyond = await errorsOf(admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '1000' }] }))
    const deleted = await admin.deleteGroups([group])
    const missing = await errorsOf(admin.deleteGroups([`never-${group}`]))
    const groups = (await admin.listGroups()).groups.map(g => g.groupId)
    console.log(JSON.stringify({ offsets, beyond, deleted, missing, groups }))
  } finally {
    await admin.disconnect()
  }
}

main().catch(e => {
  console.error(e)
  process.exit(1)
})
