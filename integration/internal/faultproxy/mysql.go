package faultproxy

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
)

const (
	// myHeader is the size of a packet header: 3-byte length + sequence id.
	myHeader = 4
	myOK     = 0x00

	// Commands.
	myComQuit            = 0x01
	myComQuery           = 0x03
	myComStmtPrepare     = 0x16
	myComStmtExecute     = 0x17
	myComStmtSendLong    = 0x18
	myComStmtClose       = 0x19
	myMaxInspectedPacket = 1 << 20 // commands larger than this are streamed unparsed

	// Capability flags.
	myClientCompress        = 1 << 5
	myClientProtocol41      = 1 << 9
	myClientSSL             = 1 << 11
	myClientQueryAttributes = 1 << 27
)

// serveMySQL handles one accepted MySQL/MariaDB client connection.
func (p *Proxy) serveMySQL(client net.Conn) {
	server, err := p.dial()
	if err != nil {
		return
	}
	defer p.untrack(server)
	s := &mySession{session: p.newSession(client, server), prepared: make(map[uint32]string)}
	s.run(
		func() error { return s.clientToServer(bufio.NewReader(client), bufio.NewWriter(server)) },
		func() error { return s.serverToClient(bufio.NewReader(server), bufio.NewWriter(client)) },
	)
}

// mySession tracks the protocol state of one MySQL connection.
type mySession struct {
	*session

	// commandPhase is set by the server pump when it forwards the OK that
	// ends authentication; the client sends no command before receiving it.
	commandPhase atomic.Bool
	// raw is set once the traffic can no longer be parsed (TLS, or
	// compression after authentication); both pumps then copy bytes.
	raw atomic.Bool
	// compress and queryAttrs are the client's negotiated capabilities,
	// set by the client pump from its handshake response.
	compress   atomic.Bool
	queryAttrs atomic.Bool

	// Under the session's mu: the text of the statement whose
	// COM_STMT_PREPARE awaits its reply ("" when none), set by the client
	// pump; the prepared statements' texts by id, set by the server pump
	// from the reply.
	preparing string
	replyDue  bool // a command that has a reply was forwarded; its first packet is still to come
	prepared  map[uint32]string
}

// next flushes w if r has nothing buffered, then reads the next packet's
// header (see readHeader).
func (s *mySession) next(r *bufio.Reader, w *bufio.Writer) (n int64, seq byte, raw bool, err error) {
	if err := flushIfIdle(r, w, myHeader); err != nil {
		return 0, 0, false, err
	}
	return s.readHeader(r)
}

// readHeader waits for the next packet and reads its header. It reports
// raw=true, without reading, if the session switched to raw copying: the
// check happens after data arrived, and the peer sends such data only after
// the switch.
func (s *mySession) readHeader(r *bufio.Reader) (n int64, seq byte, raw bool, err error) {
	if _, err := r.Peek(1); err != nil {
		return 0, 0, false, err
	}
	if s.raw.Load() {
		return 0, 0, true, nil
	}
	var hdr [myHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, false, err
	}
	n = int64(hdr[0]) | int64(hdr[1])<<8 | int64(hdr[2])<<16
	return n, hdr[3], false, nil
}

func writeHeader(w *bufio.Writer, n int64, seq byte) error {
	_, err := w.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq})
	return err
}

// clientToServer forwards client packets, recognising COMMIT.
func (s *mySession) clientToServer(r *bufio.Reader, w *bufio.Writer) error {
	handshakeSeen := false
	for {
		n, seq, raw, err := s.next(r, w)
		if err != nil {
			return err
		}
		if raw {
			return copyRaw(s.server, w, r)
		}
		if !handshakeSeen && !s.commandPhase.Load() {
			// The handshake response (or SSL request): note capabilities.
			handshakeSeen = true
			body, err := readBody(r, n)
			if err != nil {
				return err
			}
			if len(body) >= 4 {
				caps := binary.LittleEndian.Uint32(body)
				if caps&myClientProtocol41 != 0 {
					s.compress.Store(caps&myClientCompress != 0)
					s.queryAttrs.Store(caps&myClientQueryAttributes != 0)
					if caps&myClientSSL != 0 {
						// TLS starts right after this packet.
						s.raw.Store(true)
					}
				}
			}
			if err := writeHeader(w, n, seq); err != nil {
				return err
			}
			if _, err := w.Write(body); err != nil {
				return err
			}
			continue
		}
		if seq != 0 || n > myMaxInspectedPacket || !s.commandPhase.Load() {
			if err := writeHeader(w, n, seq); err != nil {
				return err
			}
			if _, err := io.CopyN(w, r, n); err != nil {
				return err
			}
			continue
		}
		body, err := readBody(r, n)
		if err != nil {
			return err
		}
		fault := None
		if text, ok := s.command(body); ok {
			fault = s.request(text, isCommit(MySQL, text), pending{})
		}
		if fault == DropBeforeCommit {
			s.close()
			return errFault
		}
		if err := writeHeader(w, n, seq); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		if fault == DropAfterCommit || fault == DropMidReply {
			_ = w.Flush()
			return s.hold()
		}
	}
}

// command notes a command packet the client pump is about to forward and
// returns its statement text if it is a request (see Trigger).
func (s *mySession) command(body []byte) (text string, request bool) {
	if len(body) == 0 {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.preparing = ""
	switch body[0] {
	case myComQuit, myComStmtSendLong, myComStmtClose: // no reply
		if body[0] == myComStmtClose && len(body) >= 5 {
			delete(s.prepared, binary.LittleEndian.Uint32(body[1:]))
		}
		return "", false
	case myComQuery:
		s.replyDue = true
		return s.queryText(body)
	case myComStmtPrepare:
		s.replyDue = true
		s.preparing = string(body[1:])
		return s.preparing, true
	case myComStmtExecute:
		s.replyDue = true
		if len(body) < 5 {
			return "", true
		}
		return s.prepared[binary.LittleEndian.Uint32(body[1:])], true
	}
	s.replyDue = true
	return "", false
}

// replyStarts reports whether a packet from the server is the first of the
// reply to the last command, and notes the statement id of a
// COM_STMT_PREPARE's reply (OK: 0x00, then the id).
func (s *mySession) replyStarts(first []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.replyDue {
		return false
	}
	s.replyDue = false
	if s.preparing != "" && len(first) >= 5 && first[0] == myOK {
		s.prepared[binary.LittleEndian.Uint32(first[1:])] = s.preparing
	}
	s.preparing = ""
	return true
}

// queryText returns the statement text of a COM_QUERY payload.
func (s *mySession) queryText(body []byte) (string, bool) {
	body = body[1:]
	if s.queryAttrs.Load() {
		// parameter_count, parameter_set_count; COMMIT has no parameters.
		count, rest, ok := lenencInt(body)
		if !ok || count != 0 {
			return "", false
		}
		if _, rest, ok = lenencInt(rest); !ok {
			return "", false
		}
		body = rest
	}
	return string(body), true
}

// lenencInt splits a length-encoded integer off b.
func lenencInt(b []byte) (uint64, []byte, bool) {
	if len(b) < 1 {
		return 0, nil, false
	}
	size := 0
	switch b[0] {
	case 0xfc:
		size = 2
	case 0xfd:
		size = 3
	case 0xfe:
		size = 8
	case 0xfb, 0xff:
		return 0, nil, false
	default:
		return uint64(b[0]), b[1:], true
	}
	if len(b) < 1+size {
		return 0, nil, false
	}
	var v uint64
	for i := size; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, b[1+size:], true
}

// serverToClient forwards server packets, carrying out queued faults.
func (s *mySession) serverToClient(r *bufio.Reader, w *bufio.Writer) error {
	greetingSeen := false
	for {
		n, seq, raw, err := s.next(r, w)
		if err != nil {
			return err
		}
		if raw {
			return copyRaw(s.client, w, r)
		}
		if !s.commandPhase.Load() {
			body, err := readBody(r, n)
			if err != nil {
				return err
			}
			if greetingSeen && len(body) > 0 && body[0] == myOK {
				// Authentication succeeded. With compression, every packet
				// from now on is wrapped; stop parsing.
				if s.compress.Load() {
					s.raw.Store(true)
				}
				s.commandPhase.Store(true)
			}
			greetingSeen = true
			if err := writeHeader(w, n, seq); err != nil {
				return err
			}
			if _, err := w.Write(body); err != nil {
				return err
			}
			continue
		}
		s.mu.Lock()
		due := s.replyDue
		s.mu.Unlock()
		if due {
			// The first packet of the reply to the last command: the
			// client sends a command only after the whole reply to the
			// previous one.
			body, err := readBody(r, n)
			if err != nil {
				return err
			}
			s.replyStarts(body)
			if pf, ok := s.head(); ok {
				switch pf.fault {
				case StallReply:
					if err := s.stallReply(w, pf); err != nil {
						return err
					}
				case DropAfterCommit:
					// The server has run the command when it starts its
					// reply; an OK or ERR is all of it.
					_ = w.Flush()
					s.close()
					return errFault
				case DropMidReply:
					if err := writeHeader(w, n, seq); err == nil && len(body) > 0 {
						_, _ = w.Write(body[:len(body)-1])
					}
					_ = w.Flush()
					s.close()
					return errFault
				}
			}
			if err := writeHeader(w, n, seq); err != nil {
				return err
			}
			if _, err := w.Write(body); err != nil {
				return err
			}
			continue
		}
		if err := writeHeader(w, n, seq); err != nil {
			return err
		}
		if _, err := io.CopyN(w, r, n); err != nil {
			return err
		}
	}
}
