package main

import (
	"cmp"
	"slices"
	"time"
)

// outcome is how one call ended, as the harness classifies it.
type outcome uint8

const (
	outCommitted outcome = iota
	outExhausted         // the policy's attempt limit or budget
	outDeadline          // the deadline cut the call, or the policy gave up for it
	outUncertain         // COMMIT failed without telling whether it committed
	outOther             // any other error
)

// stats is one worker's record of a run. Only its worker writes it while the
// run lasts; the runs' results are merged afterwards, so the hot path takes no
// lock.
type stats struct {
	lat []time.Duration // every call, a call cut by the end at its elapsed time

	calls      int64 // calls started
	inDeadline int64 // committed within the deadline, finished within the run
	late       int64 // committed after the deadline, finished within the run
	exhausted  int64
	deadline   int64
	uncertain  int64
	other      int64
	cut        int64 // still running when the run ended (outcome not counted above)
	attempts   int64 // attempts of all calls
	commits    int64 // calls reported committed, cut ones included

	// window sums, over txretry's committed calls, the time from the start
	// of the committing attempt's body (its first statement, where
	// PostgreSQL takes a SERIALIZABLE transaction's snapshot) to the call's
	// return, COMMIT's reply included, cut at the end of the run (see
	// addWindow).
	window time.Duration

	// Open loop (-rate): dropped counts the arrivals refused because
	// -max-inflight calls were queued or running; wait sums the time the
	// calls made waited from their arrival for a free worker.
	dropped int64
	wait    time.Duration

	codes map[string]int64 // failed attempts by SQLSTATE / error number

	committedIDs []int64 // calls reported committed
	uncertainIDs []int64 // calls whose commit is uncertain
	otherSample  string  // description of one "other" error, for the notes

	classes [nClasses]classStats // the same calls by class
}

// classStats is the record of the calls of one class (see callClass). Its
// fields are exported for the children's JSON reports.
type classStats struct {
	Lat        []time.Duration // as stats.lat
	Calls      int64
	InDeadline int64 // as stats.inDeadline
	Failed     int64 // exhausted, deadline, uncertain or other, within the run
	// Failed by reason, as stats' counts.
	Exhausted, Deadline, Uncertain, Other int64
	// Attempts of all the calls, and Commits the calls reported committed
	// (as stats').
	Attempts, Commits int64
	// Busy sums the calls' latencies (cut at the end of the run): over the
	// run's length, the mean number of the class's calls in flight.
	Busy time.Duration
	// Finished counts the txretry calls whose CallFinished event was
	// observed, and Queued sums those events' Queued: the time the calls
	// waited for the contention manager's admission.
	Finished int64
	Queued   time.Duration
}

func (c *classStats) merge(o *classStats) {
	c.Lat = append(c.Lat, o.Lat...)
	c.Calls += o.Calls
	c.InDeadline += o.InDeadline
	c.Failed += o.Failed
	c.Exhausted += o.Exhausted
	c.Deadline += o.Deadline
	c.Uncertain += o.Uncertain
	c.Other += o.Other
	c.Attempts += o.Attempts
	c.Commits += o.Commits
	c.Busy += o.Busy
	c.Finished += o.Finished
	c.Queued += o.Queued
}

func newStats() stats {
	return stats{
		lat:   make([]time.Duration, 0, 1024),
		codes: make(map[string]int64, 4),
	}
}

// record accounts one finished call of class cl that started at start and
// finished at fin, in a run that ended at end.
func (s *stats) record(id int64, cl callClass, out outcome, attempts int, start, fin, end time.Time, deadline time.Duration) {
	cs := &s.classes[cl]
	s.calls++
	cs.Calls++
	s.attempts += int64(attempts)
	cs.Attempts += int64(attempts)
	switch out {
	case outCommitted:
		s.commits++
		cs.Commits++
		s.committedIDs = append(s.committedIDs, id)
	case outUncertain:
		s.uncertainIDs = append(s.uncertainIDs, id)
	}
	if fin.After(end) {
		s.cut++
		s.lat = append(s.lat, end.Sub(start))
		cs.Lat = append(cs.Lat, end.Sub(start))
		cs.Busy += end.Sub(start)
		return
	}
	lat := fin.Sub(start)
	s.lat = append(s.lat, lat)
	cs.Lat = append(cs.Lat, lat)
	cs.Busy += lat
	switch out {
	case outCommitted:
		if lat <= deadline {
			s.inDeadline++
			cs.InDeadline++
		} else {
			s.late++
		}
		return
	case outExhausted:
		s.exhausted++
		cs.Exhausted++
	case outDeadline:
		s.deadline++
		cs.Deadline++
	case outUncertain:
		s.uncertain++
		cs.Uncertain++
	default:
		s.other++
		cs.Other++
	}
	cs.Failed++
}

// addQueued accounts the time a txretry call of class cl waited for
// admission, from its CallFinished event.
func (s *stats) addQueued(cl callClass, queued time.Duration) {
	s.classes[cl].Finished++
	s.classes[cl].Queued += queued
}

// addWindow adds to the window the part before end of a committed call's
// window, which began at began and ended at fin; a zero began adds nothing.
// Cut at end, one worker's windows never add up to more than the run: the
// last call of a run may finish well after it on a loaded machine.
func (s *stats) addWindow(began, fin, end time.Time) {
	if began.IsZero() || !began.Before(end) {
		return
	}
	if fin.After(end) {
		fin = end
	}
	s.window += fin.Sub(began)
}

// merge adds o to s.
func (s *stats) merge(o *stats) {
	s.lat = append(s.lat, o.lat...)
	s.calls += o.calls
	s.inDeadline += o.inDeadline
	s.late += o.late
	s.exhausted += o.exhausted
	s.deadline += o.deadline
	s.uncertain += o.uncertain
	s.other += o.other
	s.cut += o.cut
	s.attempts += o.attempts
	s.commits += o.commits
	s.window += o.window
	s.dropped += o.dropped
	s.wait += o.wait
	for k, v := range o.codes {
		s.codes[k] += v
	}
	s.committedIDs = append(s.committedIDs, o.committedIDs...)
	s.uncertainIDs = append(s.uncertainIDs, o.uncertainIDs...)
	if s.otherSample == "" {
		s.otherSample = o.otherSample
	}
	for i := range s.classes {
		s.classes[i].merge(&o.classes[i])
	}
}

// percentile returns the perMille/1000 quantile of sorted (ascending) by the
// nearest-rank method: the smallest value with at least that fraction of the
// values at or below it. perMille is clamped to [1, 1000]; an empty slice
// gives 0.
func percentile(sorted []time.Duration, perMille int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	perMille = min(max(perMille, 1), 1000)
	rank := (perMille*n + 999) / 1000 // ceil(perMille*n/1000), at least 1
	return sorted[rank-1]
}

// median returns the median of xs (the mean of the two middle values for an
// even count), or the zero value for an empty slice. xs is not modified.
func median[T ~int64 | ~float64](xs []T) T {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// minMax returns the smallest and the largest value of xs (zeros if empty).
func minMax[T cmp.Ordered](xs []T) (lo, hi T) {
	if len(xs) == 0 {
		return lo, hi
	}
	return slices.Min(xs), slices.Max(xs)
}
