// Benchmark harness for github.com/square/mongo-lock, driven by bench/go-peers.ts. It runs the
// same workloads as bench/workloads.ts and prints one JSON object. Build: go mod tidy && go build.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	lock "github.com/square/mongo-lock"
	"go.mongodb.org/mongo-driver/event"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

type hotResult struct {
	PerSecond float64 `json:"perSecond"`
	Fairness  float64 `json:"fairness"`
}

type result struct {
	Name          string               `json:"name"`
	Kind          string               `json:"kind"`
	Note          string               `json:"note"`
	Latency       map[string]float64   `json:"latency"`
	Hot           map[string]hotResult `json:"hot"`
	ManyPerSecond float64              `json:"manyPerSecond"`
	Commands      map[string]int64     `json:"commands"`
}

var sent int64

func backoff(attempt int) time.Duration {
	ceiling := 4.0 * float64(int(1)<<min(attempt-1, 16))
	if ceiling > 150 {
		ceiling = 150
	}
	return time.Duration((ceiling/2 + rand.Float64()*ceiling/2) * float64(time.Millisecond))
}

// acquire takes an exclusive lock, retrying with monglock's backoff (the library has no waiting).
func acquire(ctx context.Context, c *lock.Client, resource, id string) error {
	for attempt := 1; ; attempt++ {
		err := c.XLock(ctx, resource, id, lock.LockDetails{TTL: 30})
		if err == nil || !errors.Is(err, lock.ErrAlreadyLocked) {
			return err
		}
		time.Sleep(backoff(attempt))
	}
}

func main() {
	uri := flag.String("uri", "", "MongoDB URI")
	rounds := flag.Int("rounds", 3, "rounds per figure")
	iterations := flag.Int("iterations", 300, "latency iterations")
	hotMs := flag.Int("hot-ms", 2000, "ms per hot-resource point")
	many := flag.Int("many", 10000, "resources")
	manyWorkers := flag.Int("many-workers", 16, "workers for many resources")
	flag.Parse()

	ctx := context.Background()
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "hello" && e.CommandName != "isMaster" && e.CommandName != "endSessions" {
			atomic.AddInt64(&sent, 1)
		}
	}}
	client, err := mongo.Connect(ctx, options.Client().ApplyURI(*uri).SetMonitor(monitor).SetMaxPoolSize(100))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer client.Disconnect(ctx)
	db := client.Database(fmt.Sprintf("monglock_bench_go_%d", time.Now().UnixNano()))
	defer db.Drop(ctx)
	n := 0
	fresh := func() *lock.Client {
		n++
		c := lock.NewClient(db.Collection(fmt.Sprintf("c%d", n)))
		if err := c.CreateIndexes(ctx); err != nil {
			panic(err)
		}
		return c
	}
	id := func() string { return fmt.Sprintf("%x", rand.Int63()) }
	out := result{Name: "square/mongo-lock (Go)", Kind: "peer", Note: "Go harness; no waiting of its own: the shared backoff",
		Latency: map[string]float64{}, Hot: map[string]hotResult{}, Commands: map[string]int64{}}

	var p50s, p99s []float64
	hot := map[int][][2]float64{}
	var manys []float64
	for r := 0; r < *rounds; r++ {
		c := fresh()
		times := make([]float64, 0, *iterations)
		for i := 0; i < *iterations+50; i++ {
			start := time.Now()
			lid := id()
			if err := acquire(ctx, c, "r", lid); err != nil {
				panic(err)
			}
			if _, err := c.Unlock(ctx, lid); err != nil {
				panic(err)
			}
			if i >= 50 {
				times = append(times, float64(time.Since(start).Microseconds())/1000)
			}
		}
		sort.Float64s(times)
		p50s = append(p50s, times[len(times)/2])
		p99s = append(p99s, times[int(float64(len(times))*0.99)])

		for _, workers := range []int{1, 4, 16, 64} {
			c := fresh()
			counts := make([]float64, workers)
			var running atomic.Bool
			running.Store(true)
			time.AfterFunc(time.Duration(*hotMs)*time.Millisecond, func() { running.Store(false) })
			start := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for running.Load() {
						lid := id()
						if err := acquire(ctx, c, "hot", lid); err != nil {
							panic(err)
						}
						counts[w]++
						if _, err := c.Unlock(ctx, lid); err != nil {
							panic(err)
						}
					}
				}(w)
			}
			wg.Wait()
			total, squares := 0.0, 0.0
			for _, v := range counts {
				total += v
				squares += v * v
			}
			hot[workers] = append(hot[workers], [2]float64{total / time.Since(start).Seconds(), total * total / (float64(workers) * squares)})
		}

		c = fresh()
		var next int64 = -1
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < *manyWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := atomic.AddInt64(&next, 1)
					if i >= int64(*many) {
						return
					}
					lid := id()
					if err := acquire(ctx, c, fmt.Sprintf("r%d", i), lid); err != nil {
						panic(err)
					}
					if _, err := c.Unlock(ctx, lid); err != nil {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
		manys = append(manys, float64(*many)/time.Since(start).Seconds())
	}
	out.Latency["p50"], out.Latency["p99"] = median(p50s), median(p99s)
	for workers, samples := range hot {
		var ps, fs []float64
		for _, s := range samples {
			ps, fs = append(ps, s[0]), append(fs, s[1])
		}
		out.Hot[fmt.Sprint(workers)] = hotResult{median(ps), median(fs)}
	}
	out.ManyPerSecond = median(manys)

	c := fresh()
	count := func(step func()) int64 { before := atomic.LoadInt64(&sent); step(); return atomic.LoadInt64(&sent) - before }
	out.Commands["acquire"] = count(func() { _ = c.XLock(ctx, "c", "holder", lock.LockDetails{}) })
	out.Commands["refused"] = count(func() { _ = c.XLock(ctx, "c", "other", lock.LockDetails{}) })
	out.Commands["release"] = count(func() { _, _ = c.Unlock(ctx, "holder") })
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func median(values []float64) float64 {
	sort.Float64s(values)
	if len(values) == 0 {
		return 0
	}
	return values[len(values)/2]
}
