<?php
// phpredis against idmint, with its default settings (RESP2; pipelines by
// multi(Redis::PIPELINE), transactions by multi(), which is MULTI/EXEC).
// Prints one JSON object of the IDs it got (as decimal strings) for
// serve_resp_clients.rs.
//
// Usage: php client.php HOST PORT TOKEN
[$host, $port, $token] = [$argv[1], (int) $argv[2], $argv[3]];
$strings = fn ($values) => array_map('strval', $values);
$out = [];
$r = new Redis();
$r->connect($host, $port);
$out['client_info'] = (string) $r->rawCommand('CLIENT', 'INFO');
$out['incr_segment'] = $strings([$r->incr('order'), $r->incr('order'), $r->incr('order')]);
$out['incr_snowflake'] = $strings([$r->incr('sf'), $r->incr('sf'), $r->incr('sf')]);

$before = $r->incr('order');
$last = $r->incrBy('order', 10);
$after = $r->incr('order');
$out['incrby'] = ['before' => "$before", 'last' => "$last", 'after' => "$after", 'n' => '10'];

$pipe = $r->multi(Redis::PIPELINE);
for ($i = 0; $i < 20; $i++) {
    $pipe->incr('order');
}
$out['pipeline'] = $strings($pipe->exec());
$tx = $r->multi();
for ($i = 0; $i < 20; $i++) {
    $tx->incr('order');
}
$out['transaction'] = $strings($tx->exec());

$dBefore = $r->incr('order');
$r->multi();
$r->incr('order');
$r->incr('order');
$r->discard();
$out['discard'] = ['before' => "$dBefore", 'after' => (string) $r->incr('order')];

// PHP runs one request at a time: persistent connections are its pool.
$pooled = [];
for ($c = 0; $c < 4; $c++) {
    $p = new Redis();
    $p->pconnect($host, $port, 0, "idmint-$c");
    for ($i = 0; $i < 50; $i++) {
        $pooled[] = (string) $p->incr('order');
    }
}
$out['pool'] = $pooled;

try {
    $v = $r->incr('secret');
    $out['noauth'] = $v === false ? (string) $r->getLastError() : 'no error';
} catch (RedisException $e) {
    $out['noauth'] = $e->getMessage();
}
$authed = new Redis();
$authed->connect($host, $port);
$authed->auth($token);
$out['auth'] = $strings([$authed->incr('secret'), $authed->incr('secret')]);

echo json_encode($out), "\n";
