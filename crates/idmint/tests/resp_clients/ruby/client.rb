# ruby-redis against idmint, with its default settings (RESP2, pipelined
# and multi blocks as the gem sends them). Prints one JSON object of the IDs
# it got (as decimal strings) for serve_resp_clients.rs.
#
# Usage: ruby client.rb HOST PORT TOKEN
require "json"
require "redis"

host, port, token = ARGV[0], ARGV[1].to_i, ARGV[2]
out = {}
r = Redis.new(host: host, port: port)
out["client_info"] = r.call("CLIENT", "INFO").to_s
out["incr_segment"] = Array.new(3) { r.incr("order").to_s }
out["incr_snowflake"] = Array.new(3) { r.incr("sf").to_s }

before = r.incr("order")
last = r.incrby("order", 10)
after = r.incr("order")
out["incrby"] = { "before" => before.to_s, "last" => last.to_s, "after" => after.to_s, "n" => "10" }

out["pipeline"] = r.pipelined { |p| 20.times { p.incr("order") } }.map(&:to_s)
out["transaction"] = r.multi { |tx| 20.times { tx.incr("order") } }.map(&:to_s)

d_before = r.incr("order")
r.call("MULTI")
r.call("INCR", "order")
r.call("INCR", "order")
r.call("DISCARD")
out["discard"] = { "before" => d_before.to_s, "after" => r.incr("order").to_s }

# No pool in the gem itself: one client per thread, as its docs advise.
pooled = Queue.new
4.times.map do
  Thread.new do
    c = Redis.new(host: host, port: port)
    50.times { pooled << c.incr("order").to_s }
    c.close
  end
end.each(&:join)
out["pool"] = Array.new(pooled.size) { pooled.pop }

begin
  r.incr("secret")
  out["noauth"] = "no error"
rescue Redis::CommandError => e
  out["noauth"] = e.message
end
authed = Redis.new(host: host, port: port, password: token)
out["auth"] = Array.new(2) { authed.incr("secret").to_s }

puts JSON.generate(out)
