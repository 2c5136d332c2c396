# Perl Redis against idmint, with its default settings (RESP2; a pipeline
# is commands sent with callbacks, then wait_all_responses; multi/exec).
# Prints one JSON object of the IDs it got (as decimal strings) for
# serve_resp_clients.rs.
#
# Usage: perl client.pl HOST PORT TOKEN
use strict;
use warnings;
use JSON::PP;
use Redis;

my ($host, $port, $token) = @ARGV;
my $server = "$host:$port";
my %out;
my $r = Redis->new(server => $server);
$out{client_info} = "" . $r->client_info;
$out{incr_segment} = [map { "" . $r->incr('order') } 1 .. 3];
$out{incr_snowflake} = [map { "" . $r->incr('sf') } 1 .. 3];

my $before = $r->incr('order');
my $last = $r->incrby('order', 10);
my $after = $r->incr('order');
$out{incrby} = {before => "$before", last => "$last", after => "$after", n => '10'};

my @piped;
$r->incr('order', sub { my ($v, $err) = @_; die $err if $err; push @piped, "$v" }) for 1 .. 20;
$r->wait_all_responses;
$out{pipeline} = \@piped;

$r->multi;
$r->incr('order') for 1 .. 20;
$out{transaction} = [map {"$_"} $r->exec];

my $d_before = $r->incr('order');
$r->multi;
$r->incr('order') for 1 .. 2;
$r->discard;
$out{discard} = {before => "$d_before", after => "" . $r->incr('order')};

# No pool in the module: several connections, used in turn.
my @conns = map { Redis->new(server => $server) } 1 .. 4;
my @pooled;
for my $i (1 .. 50) {
    push @pooled, "" . $_->incr('order') for @conns;
}
$out{pool} = \@pooled;

eval { $r->incr('secret'); $out{noauth} = 'no error'; 1 } or do {
    $out{noauth} = "$@";
};
my $authed = Redis->new(server => $server, password => $token);
$out{auth} = [map { "" . $authed->incr('secret') } 1 .. 2];

print JSON::PP->new->canonical->encode(\%out), "\n";
