// ioredis against idmint, with its default settings (RESP2, pipeline() and
// multi() as ioredis sends them). Prints one JSON object of the IDs it got
// (as decimal strings) for serve_resp_clients.rs.
//
// Usage: node ioredis.js HOST PORT TOKEN
// Integer replies are JavaScript numbers by default, exact only below 2^53:
// snowflake IDs are read with `stringNumbers`, as an application must.
const Redis = require("ioredis");

async function main() {
  const [host, port, token] = process.argv.slice(2);
  const opts = { host, port: Number(port), lazyConnect: false };
  const out = {};
  const strings = (values) => values.map((v) => String(v));
  // pipeline()/multi() exec: [[err, value], ...].
  const values = (results) => results.map(([err, v]) => {
    if (err) throw err;
    return String(v);
  });

  const r = new Redis(opts);
  out.client_info = String(await r.call("CLIENT", "INFO"));
  out.incr_segment = [];
  for (let i = 0; i < 3; i++) out.incr_segment.push(String(await r.incr("order")));
  const exact = new Redis({ ...opts, stringNumbers: true });
  out.incr_snowflake = [];
  for (let i = 0; i < 3; i++) out.incr_snowflake.push(await exact.incr("sf"));
  exact.disconnect();

  const before = await r.incr("order");
  const last = await r.incrby("order", 10);
  const after = await r.incr("order");
  out.incrby = { before: String(before), last: String(last), after: String(after), n: "10" };

  const pipe = r.pipeline();
  for (let i = 0; i < 20; i++) pipe.incr("order");
  out.pipeline = values(await pipe.exec());
  const tx = r.multi();
  for (let i = 0; i < 20; i++) tx.incr("order");
  out.transaction = values(await tx.exec());

  const discardBefore = await r.incr("order");
  const discarded = r.multi();
  discarded.incr("order");
  discarded.incr("order");
  await discarded.discard().exec().catch(() => null);
  const discardAfter = await r.incr("order");
  out.discard = { before: String(discardBefore), after: String(discardAfter) };

  // No pool in ioredis: several connections used at once stand for one.
  const conns = Array.from({ length: 4 }, () => new Redis(opts));
  out.pool = strings(
    (await Promise.all(conns.map((c) => Promise.all(Array.from({ length: 50 }, () => c.incr("order")))))).flat(),
  );
  conns.forEach((c) => c.disconnect());

  try {
    await r.incr("secret");
    out.noauth = "no error";
  } catch (e) {
    out.noauth = String(e.message);
  }
  const authed = new Redis({ ...opts, password: token, stringNumbers: true });
  out.auth = [await authed.incr("secret"), await authed.incr("secret")];
  authed.disconnect();
  r.disconnect();

  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
