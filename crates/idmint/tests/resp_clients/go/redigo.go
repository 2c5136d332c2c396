// redigo against idmint, with its default settings (RESP2, a redis.Pool,
// pipelining by Send/Flush/Receive, MULTI/EXEC by Send and Do("EXEC")).
// Prints one JSON object of the IDs it got (as decimal strings) for
// serve_resp_clients.rs.
//
// Usage: redigo HOST PORT TOKEN
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/gomodule/redigo/redis"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func id(reply interface{}, err error) string {
	v, err := redis.Int64(reply, err)
	must(err)
	return strconv.FormatInt(v, 10)
}

func ids(reply interface{}, err error) []string {
	vs, err := redis.Int64s(reply, err)
	must(err)
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.FormatInt(v, 10)
	}
	return out
}

func main() {
	addr := os.Args[1] + ":" + os.Args[2]
	token := os.Args[3]
	out := map[string]interface{}{}
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
	defer pool.Close()

	c := pool.Get()
	info, err := redis.String(c.Do("CLIENT", "INFO"))
	must(err)
	out["client_info"] = info
	var seg, sf []string
	for i := 0; i < 3; i++ {
		seg = append(seg, id(c.Do("INCR", "order")))
		sf = append(sf, id(c.Do("INCR", "sf")))
	}
	out["incr_segment"], out["incr_snowflake"] = seg, sf

	before := id(c.Do("INCR", "order"))
	last := id(c.Do("INCRBY", "order", 10))
	after := id(c.Do("INCR", "order"))
	out["incrby"] = map[string]string{"before": before, "last": last, "after": after, "n": "10"}

	for i := 0; i < 20; i++ {
		must(c.Send("INCR", "order"))
	}
	must(c.Flush())
	var piped []string
	for i := 0; i < 20; i++ {
		piped = append(piped, id(c.Receive()))
	}
	out["pipeline"] = piped

	must(c.Send("MULTI"))
	for i := 0; i < 20; i++ {
		must(c.Send("INCR", "order"))
	}
	out["transaction"] = ids(c.Do("EXEC"))

	dBefore := id(c.Do("INCR", "order"))
	must(c.Send("MULTI"))
	must(c.Send("INCR", "order"))
	must(c.Send("INCR", "order"))
	_, err = c.Do("DISCARD")
	must(err)
	out["discard"] = map[string]string{"before": dBefore, "after": id(c.Do("INCR", "order"))}

	_, err = c.Do("INCR", "secret")
	if err != nil {
		out["noauth"] = err.Error()
	} else {
		out["noauth"] = "no error"
	}
	c.Close()

	var mu sync.Mutex
	var wg sync.WaitGroup
	var pooled []string
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				conn := pool.Get()
				v := id(conn.Do("INCR", "order"))
				conn.Close()
				mu.Lock()
				pooled = append(pooled, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out["pool"] = pooled

	authed, err := redis.Dial("tcp", addr, redis.DialPassword(token))
	must(err)
	out["auth"] = []string{id(authed.Do("INCR", "secret")), id(authed.Do("INCR", "secret"))}
	authed.Close()

	text, err := json.Marshal(out)
	must(err)
	fmt.Println(string(text))
}
