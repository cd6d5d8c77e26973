package uncertain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
)

var trials = flag.Int("campaign.trials", 0,
	"trials per driver path and mode in the randomized campaign (default: 100; 200 with TXRETRY_LONG true)")

// Trials per driver path and mode of TestCampaign: shortTrials in make
// test, longTrials under TXRETRY_LONG (make test-all).
const (
	shortTrials = 100
	longTrials  = 200
)

// campaignTrials returns TestCampaign's trials per driver path and mode.
func campaignTrials() int {
	if *trials > 0 {
		return *trials
	}
	if longMode() {
		return longTrials
	}
	return shortTrials
}

// longMode reports whether TXRETRY_LONG is true: make test-all runs the
// campaigns' full counts.
func longMode() bool {
	long, _ := strconv.ParseBool(os.Getenv("TXRETRY_LONG"))
	return long
}

func TestMain(m *testing.M) {
	flag.Parse()
	// go-sql-driver logs every broken connection; the faults are on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dbservertest.Main(m)
}

// noLeaks registers, first so that it runs last, a check that the test left
// no goroutine behind once its pools and proxies are closed.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

func addInt32(p *int32) int { return int(atomic.AddInt32(p, 1)) }

// mode is how an uncertain commit is handled.
type mode struct {
	name   string
	pgOnly bool
	opts   func(p *path, id string) []txretry.Option
}

var modes = []mode{
	{"no-verifier", false, func(*path, string) []txretry.Option { return nil }},
	{"callback", false, func(p *path, id string) []txretry.Option {
		return []txretry.Option{txretry.WithVerify(p.lookup(id))}
	}},
	{"xact-status", true, func(*path, string) []txretry.Option {
		return []txretry.Option{txretry.WithXactStatusVerification()}
	}},
	{"commit-marker", false, func(*path, string) []txretry.Option {
		return []txretry.Option{txretry.WithCommitMarker(markerTable)}
	}},
}

func TestCommitFaults(t *testing.T) {
	noLeaks(t)
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			for _, fault := range []faultproxy.Fault{faultproxy.DropBeforeCommit, faultproxy.DropAfterCommit, faultproxy.StallReply} {
				for _, m := range modes {
					if m.pgOnly && !p.pg {
						continue
					}
					t.Run(fault.String()+"/"+m.name, func(t *testing.T) {
						id := fmt.Sprintf("%s-%s-%s", p.name, fault, m.name)
						var runs int32
						p.proxy.Arm(fault)
						opts := append([]txretry.Option{txretry.WithCommitTimeout(commitTimeout), txretry.WithVerifyTimeout(20 * time.Second)}, m.opts(p, id)...)
						err := p.run(context.Background(), p.insert(id, &runs), opts...)
						p.proxy.Release()

						committedOnServer := fault != faultproxy.DropBeforeCommit
						if m.name == "no-verifier" {
							var ue *txretry.CommitUncertainError
							if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.As(err, &ue) || ue.Verifier != "" {
								t.Fatalf("err = %v, want ErrCommitUncertain without verifier", err)
							}
							if runs != 1 {
								t.Fatalf("fn ran %d times: an uncertain commit must not be retried", runs)
							}
							if got, want := p.count(t, id), b2i(committedOnServer); got != want {
								t.Fatalf("effect applied %d times, want %d", got, want)
							}
						} else {
							if err != nil {
								t.Fatalf("err = %v, want the verifier to resolve the commit", err)
							}
							if got := p.count(t, id); got != 1 {
								t.Fatalf("effect applied %d times, want exactly once", got)
							}
							if wantRuns := int32(1 + b2i(!committedOnServer)); runs != wantRuns {
								t.Fatalf("fn ran %d times, want %d", runs, wantRuns)
							}
						}
						p.noneInUse(t)
					})
				}
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A caller that gives up while COMMIT is in flight does not make it
// uncertain: COMMIT runs under its own timeout.
func TestCancellationDuringCommitDoesNotMakeItUncertain(t *testing.T) {
	noLeaks(t)
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			id := "cancel-" + p.name
			var runs int32
			p.proxy.Arm(faultproxy.StallReply)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for p.proxy.Stats().Faults[faultproxy.StallReply] == 0 {
					time.Sleep(time.Millisecond)
				}
				cancel()                          // the caller goes away while COMMIT waits for its reply
				time.Sleep(50 * time.Millisecond) // well within the commit timeout
				p.proxy.Release()
			}()
			err := p.run(ctx, p.insert(id, &runs), txretry.WithCommitTimeout(10*time.Second))
			if err != nil || runs != 1 || p.count(t, id) != 1 {
				t.Fatalf("err=%v runs=%d applied=%d, want a normal commit", err, runs, p.count(t, id))
			}
		})
	}
}

// The randomized campaign: concurrent workers, a random fault at a random
// COMMIT, and a count of lost and duplicated effects, which must be zero.
func TestCampaign(t *testing.T) {
	noLeaks(t)
	for _, p := range paths(t) {
		for _, m := range []mode{modes[0], autoMode(p)} {
			t.Run(p.name+"/"+m.name, func(t *testing.T) {
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
				p.proxy.SetPolicy(func(conn, commit int) faultproxy.Fault {
					mu.Lock()
					defer mu.Unlock()
					switch r := rng.Float64(); {
					case r < 0.15:
						return faultproxy.DropBeforeCommit
					case r < 0.30:
						return faultproxy.DropAfterCommit
					case r < 0.33:
						return faultproxy.StallReply
					}
					return faultproxy.None
				})
				defer p.proxy.SetPolicy(nil)
				stop := make(chan struct{})
				go func() { // stalled replies are released now and then
					for {
						select {
						case <-stop:
							return
						case <-time.After(2 * commitTimeout):
							p.proxy.Release()
						}
					}
				}()
				defer close(stop)

				type outcome struct {
					id  string
					err error
				}
				const workers = 8
				n := campaignTrials()
				results := make(chan outcome, n)
				var next atomic.Int64
				var wg sync.WaitGroup
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(n) {
								return
							}
							id := fmt.Sprintf("c-%s-%s-%d", p.name, m.name, i)
							var runs int32
							opts := append([]txretry.Option{txretry.WithCommitTimeout(commitTimeout)}, m.opts(p, id)...)
							ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
							err := p.run(ctx, p.insert(id, &runs), opts...)
							cancel()
							results <- outcome{id, err}
						}
					}()
				}
				wg.Wait()
				close(results)
				var ok, uncertain, failed, lost, duplicated int
				for r := range results {
					n := p.count(t, r.id)
					switch {
					case r.err == nil:
						ok++
						lost += b2i(n == 0)
						duplicated += b2i(n > 1)
					case errors.Is(r.err, txretry.ErrCommitUncertain):
						uncertain++
						duplicated += b2i(n > 1)
					default:
						failed++
						duplicated += b2i(n > 0) // reported failed, yet applied
						t.Logf("%s: %v", r.id, r.err)
					}
				}
				st := p.proxy.Stats()
				t.Logf("%d trials: %d ok, %d uncertain, %d failed; faults %v; lost %d, duplicated %d",
					n, ok, uncertain, failed, st.Faults, lost, duplicated)
				if lost != 0 || duplicated != 0 {
					t.Fatalf("lost %d, duplicated %d effects: want none", lost, duplicated)
				}
				if m.name != "no-verifier" && uncertain != 0 {
					t.Fatalf("%d calls left uncertain with a verifier", uncertain)
				}
				if st.Faults[faultproxy.DropBeforeCommit] == 0 || st.Faults[faultproxy.DropAfterCommit] == 0 {
					t.Fatalf("faults %v: the campaign injected too few faults to mean anything", st.Faults)
				}
				p.noneInUse(t)
			})
		}
	}
}

// autoMode is the built-in verifier natural to the path's engine.
func autoMode(p *path) mode {
	if p.pg {
		return modes[2]
	}
	return modes[3]
}
