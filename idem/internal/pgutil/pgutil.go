// Package pgutil holds the small PostgreSQL helpers that package idem and
// the delivery engine in idem/idemimpl both use.
package pgutil

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RollbackTimeout bounds the rollback after a failure; it runs even when the
// caller's context is already cancelled.
const RollbackTimeout = 5 * time.Second

// Rollback ends the connection's transaction, if it has one. When even that
// fails the connection's state is unknown, so it is closed: the server rolls
// back, and the pool discards the connection.
func Rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "rollback"); err != nil {
		_ = conn.Close(ctx)
	}
}

// NewBatch returns a batch with room for n queries, so that queueing them
// does not grow the slice step by step.
func NewBatch(n int) *pgx.Batch {
	return &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n)}
}

func HasSQLState(err error, codes ...string) bool {
	if err == nil {
		return false // without the allocation of pgErr, which escapes
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	for _, code := range codes {
		if pgErr.Code == code {
			return true
		}
	}
	return false
}

// Unreachable reports whether err says that no primary could be reached.
// Either no connection could be made (a pgconn.ConnectError): the server
// refuses connections, starts up, shuts down, or is a standby where the
// connection string asks for a primary. Or the session's server is
// read-only (SQLSTATE 25006), as an old primary restarted as a standby is.
// Neither comes from the work the connection was for: a retry that finds
// the primary back does it.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || HasSQLState(err, pgerrcode.ReadOnlySQLTransaction)
}

// Failed is what Query and QueryRow return once the Tx refuses statements.
type Failed struct{ err error }

// Fail returns the Rows (and Row) whose every method reports err.
func Fail(err error) Failed { return Failed{err} }

func (Failed) Close() {}

func (r Failed) Err() error { return r.err }

func (Failed) CommandTag() pgconn.CommandTag { return pgconn.CommandTag{} }

func (Failed) FieldDescriptions() []pgconn.FieldDescription { return nil }

func (Failed) Next() bool { return false }

func (r Failed) Scan(...any) error { return r.err }

func (r Failed) Values() ([]any, error) { return nil, r.err }

func (Failed) RawValues() [][]byte { return nil }

func (Failed) Conn() *pgx.Conn { return nil }

// FormatKey renders key parts as Field=value pairs for errors and logs.
func FormatKey(fields []string, key []any) string {
	var b strings.Builder
	for i, part := range key {
		if i > 0 {
			b.WriteByte(',')
		}
		if i < len(fields) {
			b.WriteString(fields[i])
			b.WriteByte('=')
		}
		switch v := part.(type) {
		case string:
			b.WriteString(strconv.Quote(v))
		case [16]byte:
			b.WriteString(FormatUUID(v))
		case time.Time:
			b.WriteString(v.UTC().Format(time.RFC3339Nano))
		default:
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

func FormatUUID(u [16]byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return string(buf[:])
}

// Exec runs one statement on a connection of db: what pgxpool.Pool's Exec
// does, for any DB.
func Exec(ctx context.Context, db DB, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := db.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

// DB is idem.DB: what the runtime needs of the database.
type DB interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

func (Failed) TypeMap() *pgtype.Map { return nil }
