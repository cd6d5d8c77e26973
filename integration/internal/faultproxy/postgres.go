package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
)

// PostgreSQL startup-phase request codes.
const (
	pgCancelRequest = 80877102
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

const (
	// pgMaxStartup is PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
	pgMaxStartup = 10000
	// pgHeader is the size of a typed message header: type + int32 length.
	pgHeader = 5
	// pgMaxMessage is PostgreSQL's largest message (MaxAllocSize).
	pgMaxMessage = 1<<30 - 1
)

// servePostgres handles one accepted PostgreSQL client connection.
func (p *Proxy) servePostgres(client net.Conn) {
	cr := bufio.NewReader(client)
	var startup []byte
	for startup == nil {
		msg, code, err := readStartup(cr)
		if err != nil {
			return
		}
		switch code {
		case pgSSLRequest, pgGSSENCRequest:
			// Refuse encryption; the client then sends its startup message
			// in the clear (or gives up if it requires encryption).
			if _, err := client.Write([]byte{'N'}); err != nil {
				return
			}
		case pgCancelRequest:
			p.forwardCancel(client, msg)
			return
		default:
			startup = msg
		}
	}

	server, err := p.dial()
	if err != nil {
		return
	}
	defer p.untrack(server)
	if _, err := server.Write(startup); err != nil {
		return
	}
	s := &pgSession{
		session: p.newSession(client, server),
		stmts:   make(map[string]string),
		portals: make(map[string]string),
		zSent:   1, // the startup message is answered by ReadyForQuery
	}
	s.run(
		func() error { return s.clientToServer(cr, bufio.NewWriter(server)) },
		func() error { return s.serverToClient(bufio.NewReader(server), bufio.NewWriter(client)) },
	)
}

// readStartup reads an untyped startup-phase message and returns it whole
// together with its request code.
func readStartup(r *bufio.Reader) ([]byte, uint32, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 8 || n > pgMaxStartup {
		return nil, 0, errMalformed
	}
	body, err := readBody(r, int64(n)-8)
	if err != nil {
		return nil, 0, err
	}
	return append(hdr[:], body...), binary.BigEndian.Uint32(hdr[4:]), nil
}

// forwardCancel passes a CancelRequest on over a fresh upstream connection,
// unless cancel requests are blocked.
func (p *Proxy) forwardCancel(client net.Conn, msg []byte) {
	if p.blockCancel.Load() {
		p.countCancel(true)
		return
	}
	server, err := p.dial()
	if err != nil {
		return
	}
	defer p.untrack(server)
	if _, err := server.Write(msg); err != nil {
		return
	}
	p.countCancel(false)
	// The server answers nothing and closes the connection once it has
	// processed the request; the client waits for that close.
	_, _ = io.Copy(client, server)
}

// pgSession tracks the protocol state of one PostgreSQL connection.
type pgSession struct {
	*session

	// Client pump only.
	stmts   map[string]string // prepared statement name -> text
	portals map[string]string // portal name -> text of its statement
	zSent   int               // ReadyForQuery messages the server owes so far

	// Server pump only.
	zRecv int // ReadyForQuery messages received
}

// clientToServer forwards client messages, recognising requests and COMMIT.
func (s *pgSession) clientToServer(r *bufio.Reader, w *bufio.Writer) error {
	holdAt := 0 // after a request whose reply is dropped: zSent at which to stop
	for {
		if holdAt > 0 && s.zSent >= holdAt {
			_ = w.Flush()
			return s.hold()
		}
		hdr, err := readPGHeader(r, w)
		if err != nil {
			return err
		}
		typ, n := hdr[0], int64(binary.BigEndian.Uint32(hdr[1:]))
		switch typ {
		case 'Q', 'P', 'B', 'E', 'C':
		default:
			// Not inspected: stream it.
			if _, err := w.Write(hdr[:]); err != nil {
				return err
			}
			if _, err := io.CopyN(w, r, n-4); err != nil {
				return err
			}
			if typ == 'S' || typ == 'F' { // Sync, FunctionCall
				s.zSent++
			}
			continue
		}
		body, err := readBody(r, n-4)
		if err != nil {
			return err
		}
		request, text := false, ""
		switch typ {
		case 'Q': // Query: text
			t, _, ok := cstring(body)
			if !ok {
				return errMalformed
			}
			// A simple query destroys the unnamed statement and portal.
			delete(s.stmts, "")
			delete(s.portals, "")
			request, text = true, t
		case 'P': // Parse: statement name, text, parameter types
			name, rest, ok := cstring(body)
			t, _, ok2 := cstring(rest)
			if !ok || !ok2 {
				return errMalformed
			}
			s.stmts[name] = t
			request, text = true, t
		case 'B': // Bind: portal name, statement name, ...
			portal, rest, ok := cstring(body)
			stmt, _, ok2 := cstring(rest)
			if !ok || !ok2 {
				return errMalformed
			}
			s.portals[portal] = s.stmts[stmt]
		case 'E': // Execute: portal name, max rows
			portal, _, ok := cstring(body)
			if !ok {
				return errMalformed
			}
			request, text = true, s.portals[portal]
		case 'C': // Close: 'S' or 'P', name
			if len(body) < 1 {
				return errMalformed
			}
			name, _, ok := cstring(body[1:])
			if !ok {
				return errMalformed
			}
			switch body[0] {
			case 'S':
				delete(s.stmts, name)
			case 'P':
				delete(s.portals, name)
			}
		}
		if request {
			// The reply to this request follows ReadyForQuery number zSent
			// and ends with the next one (produced by this Query, or by the
			// Sync that follows this Parse or Execute). Parse is a COMMIT
			// only when executed.
			commit := typ != 'P' && isCommit(Postgres, text)
			switch s.request(text, commit, pending{zBefore: s.zSent, zTarget: s.zSent + 1}) {
			case DropBeforeCommit:
				s.close()
				return errFault
			case DropAfterCommit, DropMidReply:
				holdAt = s.zSent + 1
			}
		}
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		if typ == 'Q' {
			s.zSent++
		}
	}
}

// readPGHeader flushes w if r has nothing buffered, then reads the next
// message's header (type and length), rejecting impossible lengths.
func readPGHeader(r *bufio.Reader, w *bufio.Writer) (hdr [pgHeader]byte, err error) {
	if err := flushIfIdle(r, w, pgHeader); err != nil {
		return hdr, err
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return hdr, err
	}
	if n := binary.BigEndian.Uint32(hdr[1:]); n < 4 || n > pgMaxMessage {
		return hdr, errMalformed
	}
	return hdr, nil
}

// serverToClient forwards server messages, carrying out queued faults.
func (s *pgSession) serverToClient(r *bufio.Reader, w *bufio.Writer) error {
	for {
		hdr, err := readPGHeader(r, w)
		if err != nil {
			return err
		}
		typ, n := hdr[0], int64(binary.BigEndian.Uint32(hdr[1:]))
		if pf, ok := s.head(); ok && s.zRecv >= pf.zBefore {
			switch pf.fault {
			case StallReply:
				if err := s.stallReply(w, pf); err != nil {
					return err
				}
			case DropMidReply:
				if typ == 'Z' && s.zRecv+1 >= pf.zTarget {
					// Everything but the reply's end went on.
					_ = w.Flush()
					s.close()
					return errFault
				}
			case DropAfterCommit:
				if _, err := io.CopyN(io.Discard, r, n-4); err != nil {
					return err
				}
				if typ == 'Z' {
					s.zRecv++
					if s.zRecv >= pf.zTarget {
						_ = w.Flush()
						s.close()
						return errFault
					}
				}
				continue
			}
		}
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := io.CopyN(w, r, n-4); err != nil {
			return err
		}
		if typ == 'Z' {
			s.zRecv++
		}
	}
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}
