package idemimpl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
)

type sentinel struct {
	name string
	err  error
	want idem.Action
}

// sentinels are the errors Handle (and adapters) report for callers to branch
// on, with the action each one calls for. TestActionForCoversEverySentinel
// keeps the list complete.
var sentinels = []sentinel{
	{"ErrInProgress", idem.ErrInProgress, idem.Retry},
	{"ErrKeyReused", idem.ErrKeyReused, idem.DeadLetter},
	{"ErrInvalidKey", idem.ErrInvalidKey, idem.DeadLetter},
	{"ErrOutsideWindow", idem.ErrOutsideWindow, idem.DeadLetter},
	{"ErrStale", idem.ErrStale, idem.Ack},
	{"ErrUndecodableResult", idem.ErrUndecodableResult, idem.DeadLetter},
	{"ErrUnencodable", idem.ErrUnencodable, idem.DeadLetter},
	{"ErrUndecodablePayload", idem.ErrUndecodablePayload, idem.DeadLetter},
	{"ErrRetryable", idem.ErrRetryable, idem.Retry},
	{"ErrClaimLost", idem.ErrClaimLost, idem.Retry},
	{"ErrNotMigrated", idem.ErrNotMigrated, idem.Retry},
}

// actionInbox builds errors exactly as Handle does, through fail and
// retryable.
var actionInbox = &Inbox[deliveryForAction, idem.None]{
	table: Table[deliveryForAction]{Consumer: "test.action"},
	delivery: delivery[deliveryForAction, idem.None]{
		consumerOf: consumerOf[deliveryForAction]{name: "test.action", fields: []string{"ID"}},
	},
}

type deliveryForAction struct {
	ID    string
	Ratio float64
}

var actionKey = []any{"msg-1"}

// wrappings are the ways an error reaches the consumer: as it is, in a %w
// chain, in the *Error Handle returns (with and without a key), that *Error
// wrapped again by an adapter, and joined with another error.
var wrappings = []struct {
	name string
	wrap func(error) error
}{
	{"bare", func(err error) error { return err }},
	{"%w", func(err error) error { return fmt.Errorf("context: %w", err) }},
	{"*Error", func(err error) error { return actionInbox.fail(actionKey, err) }},
	{"*Error without key", func(err error) error { return actionInbox.fail(nil, err) }},
	{"%w of *Error", func(err error) error { return fmt.Errorf("adapter: delivery 3: %w", actionInbox.fail(actionKey, err)) }},
	{"errors.Join", func(err error) error { return errors.Join(errors.New("also"), err) }},
}

func pgError(code string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "a server error"}
}

// connectError is what pgx returns when the server cannot be reached: a
// real *pgconn.ConnectError, from a port that nothing listens on.
func connectError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://nobody@127.0.0.1:%d/none?sslmode=disable&connect_timeout=5", addr.Port))
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a port nothing listens on")
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("connect error is %T (%v); want a *pgconn.ConnectError", err, err)
	}
	return err
}

// TestActionFor checks the ack policy for every error Handle returns, each
// built the way Handle builds it (from the same functions where they are
// pure), and for the database, network and context errors that reach it,
// through every wrapping.
func TestActionFor(t *testing.T) {
	invalidKeySize := checkKeySize([]string{"A", "B"}, []any{strings.Repeat("a", idem.MaxKeyBytes), "b"})
	_, unencodableMsg := fingerprint(deliveryForAction{ID: "m", Ratio: math.NaN()})
	_, unknownScheme := sameFingerprint(append([]byte{7}, make([]byte, fingerprintLen-1)...), nil)
	_, badLength := sameFingerprint([]byte{1, 2, 3}, nil)
	_, marshalErr := json.Marshal(math.NaN())
	var result struct{ N int }
	unmarshalErr := json.Unmarshal([]byte(`{"N":"seven"}`), &result)
	syntaxErr := json.Unmarshal([]byte(`{"order_id":`), &result)
	for _, err := range []error{invalidKeySize, unencodableMsg, unknownScheme, badLength, marshalErr, unmarshalErr, syntaxErr} {
		if err == nil {
			t.Fatal("a function expected to fail returned nil; the table below would test nothing")
		}
	}
	connErr := connectError(t)
	ctxCanceled, cancel := context.WithCancel(context.Background())
	cancel()
	ctxExpired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()

	type row struct {
		name string
		err  error
		want idem.Action
	}
	rows := []row{{"nil", nil, idem.Ack}}
	for _, s := range sentinels {
		rows = append(rows, row(s))
	}
	rows = append(rows,
		// Key and fingerprint, before anything is sent.
		row{"CheckString empty", CheckString("OrderID", ""), idem.DeadLetter},
		row{"CheckString NUL", CheckString("OrderID", "a\x00b"), idem.DeadLetter},
		row{"CheckString invalid UTF-8", CheckString("OrderID", "\xff"), idem.DeadLetter},
		row{"CheckString too long", CheckString("OrderID", strings.Repeat("x", idem.MaxKeyBytes+1)), idem.DeadLetter},
		row{"CheckUUID zero", CheckUUID("RequestID", [16]byte{}), idem.DeadLetter},
		row{"CheckInt zero", CheckInt[int64]("Seq", 0), idem.DeadLetter},
		row{"CheckInt zero uint64", CheckInt[uint64]("Seq", 0), idem.DeadLetter},
		row{"InvalidKey nil message", InvalidKey("Provider", "is missing: the message is nil"), idem.DeadLetter},
		row{"key over MaxKeyBytes", invalidKeySize, idem.DeadLetter},
		row{"message unencodable (NaN)", unencodableMsg, idem.DeadLetter},
		// acquire.
		row{"acquire: context canceled", fmt.Errorf("idem: acquire a connection: %w", ctxCanceled.Err()), idem.Retry},
		row{"acquire: deadline exceeded", fmt.Errorf("idem: acquire a connection: %w", ctxExpired.Err()), idem.Retry},
		row{"acquire: server unreachable", fmt.Errorf("idem: acquire a connection: %w", connErr), idem.Retry},
		row{"acquire: too many connections 53300", fmt.Errorf("idem: acquire a connection: %w", pgError(pgerrcode.TooManyConnections)), idem.Retry},
		row{"acquire: cannot connect now 57P03", fmt.Errorf("idem: acquire a connection: %w", pgError(pgerrcode.CannotConnectNow)), idem.Retry},
		row{"acquire: contended, no connection within the claim wait", fmt.Errorf("%w (waited %v for a connection ...)", idem.ErrInProgress, time.Second), idem.Retry},
		// claim.
		row{"claim: lock timeout, as Handle maps it", idem.ErrInProgress, idem.Retry},
		row{"claim: admin shutdown 57P01", fmt.Errorf("idem: claim: %w", pgError(pgerrcode.AdminShutdown)), idem.Retry},
		row{"claim: connection failure 08006", fmt.Errorf("idem: claim: %w", pgError(pgerrcode.ConnectionFailure)), idem.Retry},
		row{"claim: undefined table 42P01 (not migrated yet)", fmt.Errorf("idem: claim: %w", pgError(pgerrcode.UndefinedTable)), idem.Retry},
		row{"claim: statement timeout 57014", fmt.Errorf("idem: claim: %w", pgError(pgerrcode.QueryCanceled)), idem.Retry},
		row{"claim: connection reset", fmt.Errorf("idem: claim: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), idem.Retry},
		row{"claim: unexpected EOF", fmt.Errorf("idem: claim: %w", io.ErrUnexpectedEOF), idem.Retry},
		row{"claim: closed network connection", fmt.Errorf("idem: claim: %w", net.ErrClosed), idem.Retry},
		row{"claim: i/o timeout", fmt.Errorf("idem: claim: %w", os.ErrDeadlineExceeded), idem.Retry},
		row{"claim: context canceled", fmt.Errorf("idem: claim: %w", context.Canceled), idem.Retry},
		row{"claim: deadline exceeded", fmt.Errorf("idem: claim: %w", context.DeadlineExceeded), idem.Retry},
		row{"claim: stale", idem.ErrStale, idem.Ack},
		// read back.
		row{"read back: row gone", actionInbox.retryable(actionKey, errors.New("idem: the claim conflicted with an inbox row that was gone when read back")), idem.Retry},
		row{"read back: row gone after a serialization failure", actionInbox.retryable(actionKey, pgError(pgerrcode.SerializationFailure)), idem.Retry},
		row{"read back: lookup failed", fmt.Errorf("idem: read the processed row: %w", pgError(pgerrcode.AdminShutdown)), idem.Retry},
		row{"read back: fingerprint of an unknown scheme", unknownScheme, idem.Retry},
		row{"read back: fingerprint of a bad length", badLength, idem.Retry},
		row{"read back: stored result undecodable", fmt.Errorf("%w (%T): %w; the message was processed, only its stored result cannot be replayed", idem.ErrUndecodableResult, result, unmarshalErr), idem.DeadLetter},
		// The handler and what follows it.
		row{"handler's own error", fmt.Errorf("idem: handler: %w", errors.New("billing: insufficient funds")), idem.Retry},
		row{"handler: unique violation 23505 of its own tables", fmt.Errorf("idem: handler: %w", pgError(pgerrcode.UniqueViolation)), idem.Retry},
		row{"handler: serialization failure 40001", actionInbox.fail(actionKey, fmt.Errorf("idem: handler: %w", pgError(pgerrcode.SerializationFailure))), idem.Retry},
		row{"handler: deadlock 40P01", actionInbox.fail(actionKey, fmt.Errorf("idem: handler: %w", pgError(pgerrcode.DeadlockDetected))), idem.Retry},
		row{"handler: its own lock timeout 55P03", fmt.Errorf("idem: handler: %w", pgError(pgerrcode.LockNotAvailable)), idem.Retry},
		row{"handler: admin shutdown 57P01", fmt.Errorf("idem: handler: %w", pgError(pgerrcode.AdminShutdown)), idem.Retry},
		row{"handler: context canceled", fmt.Errorf("idem: handler: %w", context.Canceled), idem.Retry},
		row{"handler: an undecodable part of its message", fmt.Errorf("idem: handler: %w", fmt.Errorf("event e-1: %w: %w", idem.ErrUndecodablePayload, syntaxErr)), idem.DeadLetter},
		row{"handler: tried to commit", fmt.Errorf("idem: handler: %w", errTxOwned), idem.Retry},
		row{"handler: used its Tx after returning", fmt.Errorf("idem: handler: %w", pgx.ErrTxClosed), idem.Retry},
		row{"before commit hook's error", fmt.Errorf("idem: before commit: %w", errors.New("quota exceeded")), idem.Retry},
		row{"connection outside the transaction before the commit", errOutsideBeforeCommit, idem.Retry},
		row{"result unencodable", fmt.Errorf("%w: encode the result: %w", idem.ErrUnencodable, marshalErr), idem.DeadLetter},
		// complete: store the result and commit.
		row{"commit: claim lost", errClaimLost, idem.Retry},
		row{"commit: transaction aborted by a swallowed statement error", errAborted, idem.Retry},
		row{"commit: unknown outcome, connection lost", fmt.Errorf("idem: store the result and commit: %w", io.ErrUnexpectedEOF), idem.Retry},
		row{"commit: unknown outcome, context canceled", fmt.Errorf("idem: store the result and commit: %w", context.Canceled), idem.Retry},
		row{"commit: serialization failure 40001", actionInbox.fail(actionKey, fmt.Errorf("idem: store the result and commit: %w", pgError(pgerrcode.SerializationFailure))), idem.Retry},
		row{"commit: inbox row gone", fmt.Errorf("idem: the inbox row was gone when the result was stored (%d rows updated); did the handler delete it?", 0), idem.Retry},
		// Purge.
		row{"purge failed", fmt.Errorf("idem: purge %s: %w", "idem_test", pgError(pgerrcode.AdminShutdown)), idem.Retry},
		// Adapters.
		row{"adapter: undecodable body", fmt.Errorf("%w: %w", idem.ErrUndecodablePayload, syntaxErr), idem.DeadLetter},
		row{"both retryable and dead-letter", errors.Join(idem.ErrInProgress, idem.ErrKeyReused), idem.Retry},
	)
	for _, r := range rows {
		for _, w := range wrappings {
			if r.err == nil && w.name != "bare" {
				continue // nil is never wrapped
			}
			err := w.wrap(r.err)
			if got := idem.ActionFor(err); got != r.want {
				t.Errorf("%s, %s: ActionFor(%v) = %v; want %v", r.name, w.name, err, got, r.want)
			}
		}
	}
}

// TestActionForCoversEverySentinel fails when errors.go declares an Err
// variable that the sentinels table (and so TestActionFor) does not list.
func TestActionForCoversEverySentinel(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			for _, name := range spec.(*ast.ValueSpec).Names {
				if name.IsExported() && strings.HasPrefix(name.Name, "Err") {
					declared = append(declared, name.Name)
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("errors.go declares no Err variables; is this the right file?")
	}
	for _, name := range declared {
		if !slices.ContainsFunc(sentinels, func(s sentinel) bool { return s.name == name }) {
			t.Errorf("errors.go declares %s, but the sentinels of action_test.go do not list it: add it with the Action it calls for", name)
		}
	}
}

// TestActionString checks the names the actions print as.
func TestActionString(t *testing.T) {
	for a, want := range map[idem.Action]string{idem.Ack: "ack", idem.Retry: "retry", idem.DeadLetter: "dead-letter", 0: "Action(0)", 9: "Action(9)"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q; want %q", uint8(a), got, want)
		}
	}
}
