// Observe shows txretry's observability adapters at work: a short burst of
// concurrent SERIALIZABLE increments of one hot row on PostgreSQL, observed
// by slogretry (one log line per retry and per call that retried) and by
// otelretry (metrics and spans), with the OpenTelemetry SDK's stdout
// exporters so that everything recorded is printed.
//
// Usage:
//
//	go run ./observe [-workers 4] [-calls 5] [-all-spans]
//
// Each call passes three observers, one txretry.WithObserver option each:
// otelretry's, slogretry's and the program's own count of attempts. The
// calls share one context; otelretry gives each its own span, and the span
// "fn" that fn starts from the context it receives is a child of its
// call's span, once per attempt.
//
// The program prints, in order: the log lines of slogretry (text), the spans
// of the calls that did not commit on their first attempt, each preceded by
// its fn's spans (JSON, one per line; -all-spans prints every call's), the
// metrics (JSON, one line), and a summary. The server comes from
// TXRETRY_PG_DSN, a container or a throwaway server (see package dbserver
// in the integration module). The program keeps its table in the schema txretry_observe
// (flag -namespace). It exits with status 1 if the counter does not match
// the calls that committed or no database is reachable.
package main
