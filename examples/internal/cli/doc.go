// Package cli is the frame the example programs share around their own work,
// so that each program's main.go shows what it does with txretry and little
// else:
//
//   - [Engines] maps the -db flag (all, postgres or mysql) to engines, and
//     [Parse] parses a command line that takes flags only;
//   - [UsageStatus] turns a rejected command line into the exit status;
//   - [Program.Run] finds the servers through package dbserver (integration module), runs the
//     program under a context that ends on SIGINT or SIGTERM or after the
//     program's -timeout, and stops the servers it started;
//   - [Program.EachServer] is Run for a program that does the same on every
//     server found and prints one verdict;
//   - [SyncWriter] serializes the output that concurrent workers share.
//
// The exit statuses are the programs' usual ones: 0 for success and for -h,
// 1 for a failed run or no database reachable, 2 for a bad command line.
package cli
