package store

import (
	"context"
	"encoding/binary"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A first pass saves a million objects and as many keys into the mirror
// by COPY (docs/design.md, "Memory and CPU"). pgx's CopyFrom takes each row as
// []any and looks up an encoder for every value of it: 2.2 s of CPU of a
// 1M first pass's 35 s, besides a boxed value per column. The mirror's
// own tables have fixed column types, so their rows are written here in
// COPY's binary format straight into a buffer, a batch at a time, and
// streamed through the connection's CopyFrom.

// copyBinary streams COPY table (cols) FROM STDIN in the binary format,
// each row appended by next (false when there are none left), on tx's
// connection.
func copyBinary(ctx context.Context, tx pgx.Tx, table pgx.Identifier, cols []string, next func(b []byte) ([]byte, bool, error)) error {
	sql := "COPY " + table.Sanitize() + " (" + strings.Join(cols, ", ") + ") FROM STDIN (FORMAT binary)"
	_, err := tx.Conn().PgConn().CopyFrom(ctx, &binaryRows{next: next, buf: append([]byte(nil), copyHeader...)}, sql)
	return err
}

// copyHeader is COPY's binary signature, flags and header extension length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// binaryRows is the io.Reader of copyBinary: rows encoded a batch of
// about copyBatch bytes at a time, then the trailer.
type binaryRows struct {
	next func(b []byte) ([]byte, bool, error)
	buf  []byte
	off  int
	done bool
}

const copyBatch = 64 << 10

func (r *binaryRows) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for len(r.buf) < copyBatch {
			b, more, err := r.next(r.buf)
			if err != nil {
				return 0, err
			}
			r.buf = b
			if !more {
				r.buf = binary.BigEndian.AppendUint16(r.buf, 0xffff) // the trailer
				r.done = true
				break
			}
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// The fields of a binary COPY row: its column count, then each value's
// length (-1: NULL) and bytes in the column type's binary form.

func appendFields(b []byte, n int) []byte { return binary.BigEndian.AppendUint16(b, uint16(n)) }

func appendNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }

// appendText is a text value; the server checks it is valid in the
// database's encoding, as it checks text sent any other way.
func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendTextOrNull is s, or NULL where s is empty.
func appendTextOrNull(b []byte, s string) []byte {
	if s == "" {
		return appendNull(b)
	}
	return appendText(b, s)
}

func appendInt4(b []byte, v int32) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(v))
}

func appendInt8(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

// postgresEpoch is 2000-01-01T00:00:00Z in Unix microseconds: a
// timestamptz is sent as microseconds since then.
const postgresEpoch = 946_684_800_000_000

// appendTimestamptz is t to the microsecond, as pgx sends one.
func appendTimestamptz(b []byte, t time.Time) []byte {
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - postgresEpoch
	return appendInt8(b, us)
}

// appendJSONB is the JSON document doc as jsonb: version 1, then its text.
func appendJSONB(b []byte, doc []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(doc)+1))
	b = append(b, 1)
	return append(b, doc...)
}
