// node-redis against idmint, with its default settings (RESP2, auto-pipelining
// of commands sent in the same tick, MULTI/EXEC for multi()). Prints one JSON
// object of the IDs it got (as decimal strings) for serve_resp_clients.rs.
//
// Usage: node node_redis.js HOST PORT TOKEN
// Integer replies are JavaScript numbers by default, exact only below 2^53:
// snowflake IDs are read with NUMBER mapped to String, as an application must.
const { createClient, createClientPool, RESP_TYPES } = require("redis");

async function main() {
  const [host, port, token] = process.argv.slice(2);
  const url = `redis://${host}:${port}`;
  const out = {};
  const strings = (values) => values.map((v) => String(v));

  const client = await createClient({ url }).connect();
  out.client_info = String(await client.sendCommand(["CLIENT", "INFO"]));
  out.incr_segment = [];
  for (let i = 0; i < 3; i++) out.incr_segment.push(String(await client.incr("order")));
  const exact = client.withTypeMapping({ [RESP_TYPES.NUMBER]: String });
  out.incr_snowflake = [];
  for (let i = 0; i < 3; i++) out.incr_snowflake.push(await exact.incr("sf"));

  const before = await client.incr("order");
  const last = await client.incrBy("order", 10);
  const after = await client.incr("order");
  out.incrby = { before: String(before), last: String(last), after: String(after), n: "10" };

  // Auto-pipelining: commands of one tick go out together.
  out.pipeline = strings(await Promise.all(Array.from({ length: 20 }, () => client.incr("order"))));
  const tx = client.multi();
  for (let i = 0; i < 20; i++) tx.incr("order");
  out.transaction = strings(await tx.exec());

  // DISCARD on a connection of its own: the queued INCRs never run.
  const solo = await createClient({ url }).connect();
  const discardBefore = await solo.incr("order");
  await solo.sendCommand(["MULTI"]);
  await solo.sendCommand(["INCR", "order"]);
  await solo.sendCommand(["INCR", "order"]);
  await solo.sendCommand(["DISCARD"]);
  const discardAfter = await solo.incr("order");
  out.discard = { before: String(discardBefore), after: String(discardAfter) };
  solo.destroy();

  const pool = await createClientPool({ url }).connect();
  out.pool = strings(
    await Promise.all(Array.from({ length: 200 }, () => pool.incr("order"))),
  );
  pool.destroy();

  try {
    await client.incr("secret");
    out.noauth = "no error";
  } catch (e) {
    out.noauth = String(e.message);
  }
  const authed = await createClient({ url, password: token })
    .withTypeMapping({ [RESP_TYPES.NUMBER]: String })
    .connect();
  out.auth = [await authed.incr("secret"), await authed.incr("secret")];
  authed.destroy();
  // What node-redis parses of the server's own replies.
  const info = await client.info();
  const [incrInfo] = await client.commandInfo(["incr"]);
  out.introspection = {
    command: String((await client.command()).length),
    command_count: String(await client.commandCount()),
    incr_arity: String(incrInfo.arity),
    info_ids_issued: /ids_issued:(\d+)/.exec(info)[1],
  };
  client.destroy();

  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
