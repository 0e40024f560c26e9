// Package model is the plain data idemgen generates from: packages, their
// annotated handlers, key parts and types, and the inbox schemas they need.
// It holds no go/ast or go/types values; the loader fills it, the emitters
// and the migrate package read it.
package model

import (
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/diag"
)

// Program is everything one idemgen run generates from.
type Program struct {
	// Packages are sorted by import path.
	Packages []Package
}

// MigrationsDirs returns the migrations folders of p's packages, sorted.
func (p Program) MigrationsDirs() []string {
	var dirs []string
	for _, pkg := range p.Packages {
		dirs = append(dirs, pkg.MigrationsDir)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// Package is one loaded Go package.
type Package struct {
	Path string // import path
	Name string
	Dir  string // absolute
	// Handlers are sorted by position.
	Handlers []Handler
	// MigrationsDir is the absolute folder the package's inbox migrations
	// go to.
	MigrationsDir string
	// Unread: idemgen could not read the package (it does not compile, or
	// its directives have errors), so its output is neither compared nor
	// written, and its consumers are not taken for removed.
	Unread bool
	// LayoutSource is the "file.go:line" of the //go:generate line that gave
	// MigrationsDir, or "" when the command line or the default did.
	LayoutSource string
	// Generated lists the idemgen files present in Dir before this run (base
	// names), so that those no longer needed are found.
	Generated []string
	// Retired are the consumers the package declares retired
	// (//idem:retired): their handlers are gone on purpose, their inbox
	// migrations stay.
	Retired []Retired
}

// Retired is a //idem:retired directive.
type Retired struct {
	Pos      diag.Pos
	Consumer string
}

// Handler is one //idem:handler function or method.
type Handler struct {
	Pos     diag.Pos
	Package string // import path
	Func    string // the Go name of the function or method
	// Recv is the method's receiver, nil for a function.
	Recv *Recv
	// Msg is the message parameter's type: a named struct type or a pointer
	// to one.
	Msg Type
	// Outbox: the handler takes out *idem.Outbox right after tx and may
	// publish outgoing messages, which the wrapper writes to idem_outbox in
	// its commit round trip.
	Outbox bool
	// Set: the handler is set-based, it takes the whole batch: its message
	// parameter is msgs []M (Msg is M) and its results ([]R, error) (Result
	// is R) or error, one result a message it is given.
	Set bool
	// Result is the handler's result type, nil when it returns only error.
	Result *Type
	// ResultShape is the JSON shape of Result's values, as stored in the
	// inbox, and ResultPos where the result type is written.
	ResultShape *Shape
	ResultPos   diag.Pos

	Consumer string
	Table    string // SQL name, optionally schema-qualified
	Retain   time.Duration
	// Mode is how the handler's effect is made idempotent: in the inbox's
	// transaction (ModeTx) or, for an effect outside the database, by a
	// claim with a lease around a call that passes the idempotency key on
	// (ModeExternal). ModePos is where the directive says it: its mode=
	// option, or the directive itself for the default.
	Mode    Mode
	ModePos diag.Pos
	// Entity is the business table of a ModeEntity handler, whose rows are
	// its markers; nil in the other modes.
	Entity *Entity
	// Lease is how long a claim of a ModeExternal handler is honoured
	// before another worker may take it over (lease=); 0 in ModeTx.
	Lease time.Duration
	Key   []KeyPart
	// Guard is the stale-message guard (order= and version=), nil without
	// one.
	Guard *Guard
	// Partition makes the inbox a table partitioned by the time bucket of
	// each message's own time (partition= and time=); nil for an inbox that
	// is not partitioned.
	Partition *Partition
	// NullsNotDistinct: the server is PostgreSQL 15 or newer, so nullable
	// key parts get one UNIQUE NULLS NOT DISTINCT constraint instead of a
	// partial unique index per null pattern.
	NullsNotDistinct bool
	// MigrationsDir is the absolute folder of the handler's migration.
	MigrationsDir string
	// Migration is the migration of MigrationsDir that creates the
	// handler's table; for mode=entity, the one that adds the fingerprint
	// column to it. OutboxMigration is the first migration of the outbox
	// chain there, for a handler that publishes. Both are paths relative to
	// the package's directory, with slashes
	// ("migrations/00004_idem_billing_charge.sql"). The wrapper's Check
	// tells to apply them. The generate package fills them once it has
	// planned the folders; they are "" when there is none.
	Migration       string
	OutboxMigration string

	// Fixture is the function of the package's tests named by fixture=, which
	// supplies the generated tests' receiver and message; empty for none.
	Fixture string
	// Vary is the message field the generated tests change to make a message
	// with the same key and another payload; nil when there is none, and
	// NoVary says why.
	Vary   *VaryField
	NoVary string
	// Envelope is set when the message type is idem.Message[T] or
	// idem.Request[T], or a pointer to one; T is Msg.Deref().Args[0], and
	// key paths start at the envelope (ID, Key, Client, Body.Field).
	Envelope bool
	// Request is set, with Envelope, when the envelope is idem.Request[T],
	// the HTTP front door's: its key parts are Key and Client, not a
	// broker's message id.
	Request bool
}

// Mode is a handler's mode= (docs/directive.md).
type Mode string

const (
	// ModeTx: the business change commits in the inbox's transaction (the
	// default).
	ModeTx Mode = "tx"
	// ModeExternal: claim the key with a lease, call the handler with no
	// transaction open (idem.KeyFrom gives it the key to pass on), then
	// record it done where the claim still holds.
	ModeExternal Mode = "external"
	// ModeEntity: the row the handler inserts into its business table is
	// the marker; a unique violation of the table's key constraint is the
	// duplicate signal, and a fingerprint column (added by idemgen's
	// migration) tells a duplicate from a reused key.
	ModeEntity Mode = "entity"
	// ModeNatural: no marker; the handler is idempotent by construction,
	// which its generated test proves against a snapshot of its state.
	ModeNatural Mode = "natural"
)

// Entity is the business table of a ModeEntity handler (table=, columns=,
// constraint=, result=).
type Entity struct {
	// Table is the business table, as the user's migrations name it,
	// optionally schema-qualified; TablePos is where table= says it.
	Table    string
	TablePos diag.Pos
	// Columns hold the key parts, in key order; ColumnsPos is where
	// columns= says them.
	Columns    []string
	ColumnsPos diag.Pos
	// Constraint is the unique constraint (or index) over Columns; empty
	// for the one covering exactly Columns, which the runtime finds.
	Constraint string
	// Result is the function of the package that reads a duplicate's
	// result back (result=), empty for a handler without a result.
	Result string
}

// EntityMarker is what idemgen's migrations of a ModeEntity consumer leave
// behind: the fingerprint column on its business table.
type EntityMarker struct {
	Consumer string
	Table    string
}

// External reports whether h runs in ModeExternal.
func (h Handler) External() bool { return h.Mode == ModeExternal }

// Natural reports whether h runs in ModeNatural.
func (h Handler) Natural() bool { return h.Mode == ModeNatural }

// EntityMode reports whether h runs in ModeEntity.
func (h Handler) EntityMode() bool { return h.Mode == ModeEntity }

// Body is the body type T of an Envelope handler's idem.Message[T] or
// idem.Request[T].
func (h Handler) Body() Type { return h.Msg.Deref().Args[0] }

// Partition is how a partitioned inbox places a message (partition= and
// time=): in the bucket of its own time, a range partition of the inbox, by
// the bucket column, which is the last column of the unique key.
type Partition struct {
	// Bucket is the width of a partition: hour, day, week or month
	// (BucketHour, ...).
	Bucket string
	// Time is the message's time field: Path, Hops and Type are set (a
	// time.Time), Kind is KeyTime and Column is BucketColumn.
	Time KeyPart
}

// The buckets of partition=.
const (
	BucketHour  = "hour"
	BucketDay   = "day"
	BucketWeek  = "week"
	BucketMonth = "month"
)

// Buckets lists the buckets of partition=, narrowest first.
var Buckets = []string{BucketHour, BucketDay, BucketWeek, BucketMonth}

// BucketLongest is the longest a bucket lasts: a retention shorter than it
// would drop a bucket's partition while its messages still arrive.
var BucketLongest = map[string]time.Duration{
	BucketHour:  time.Hour,
	BucketDay:   24 * time.Hour,
	BucketWeek:  7 * 24 * time.Hour,
	BucketMonth: 31 * 24 * time.Hour,
}

// BucketColumn is the partition key column of a partitioned inbox: the
// start of the bucket of the message's time, a timestamptz.
const BucketColumn = "bucket"

// Guard is a stale-message guard: per entity, only a message whose version
// is greater than the last applied one is processed.
type Guard struct {
	// Entity is the field that names the entity; it is stored like a
	// key part, in Column.
	Entity KeyPart
	// Version is the monotonically increasing integer field, one whose
	// values fit an int64 (FitsInt64); its value is sent as an int64.
	Version KeyPart
}

// VaryField is a field of a message, outside its key, whose change changes
// the message's payload fingerprint.
type VaryField struct {
	// Field is a field of the message struct itself, or Body.F, a field F
	// of the body of an Envelope handler's message.
	Field string
	Kind  VaryKind
	// Type is the field's type.
	Type Type
}

// VaryKind is how a VaryField is changed.
type VaryKind int

const (
	VaryString VaryKind = iota // append to it
	VaryInt                    // increment it
	VaryBool                   // negate it
)

// Recv is a method receiver.
type Recv struct {
	Type    string // the receiver's named type, in the handler's package
	Pointer bool
	// Struct is true when Type is a struct type, whose zero value the
	// generated tests spell as a composite literal.
	Struct bool
}

// Names returns the Go identifiers generated for h.
func (h Handler) Names() Names { return NamesFor(h.Func) }

// Names are the identifiers idemgen declares for one handler.
type Names struct {
	Wrapper     string // ChargeIdem
	Constructor string // NewChargeIdem
	TableVar    string // idemChargeTable
	KeyFunc     string // idemChargeKey
	OrderFunc   string // idemChargeOrder, for a stale-message guard
	Test        string // TestChargeIdem, in the generated test file
}

// All lists the names idemgen declares in the package's non-test code.
func (n Names) All() []string {
	return []string{n.Wrapper, n.Constructor, n.TableVar, n.KeyFunc, n.OrderFunc}
}

// NamesFor returns the names generated for a handler called fn. An
// unexported handler gets an unexported wrapper.
func NamesFor(fn string) Names {
	upper := strings.ToUpper(fn[:1]) + fn[1:]
	n := Names{
		Wrapper:     fn + "Idem",
		Constructor: "New" + upper + "Idem",
		TableVar:    "idem" + upper + "Table",
		KeyFunc:     "idem" + upper + "Key",
		OrderFunc:   "idem" + upper + "Order",
		Test:        "Test" + upper + "Idem",
	}
	if !isExported(fn) {
		n.Constructor = "new" + upper + "Idem"
	}
	return n
}

func isExported(name string) bool { return name[0] >= 'A' && name[0] <= 'Z' }

// KeyKind is the kind of value a key part holds.
type KeyKind int

const (
	KeyString KeyKind = iota
	KeyInt            // signed and unsigned integers
	KeyUUID           // 16-byte arrays such as github.com/google/uuid.UUID
	// KeyTime is the time field of a partitioned inbox (Partition.Time),
	// never a part of Key.
	KeyTime
)

// KeyPart is one part of a handler's key: a field of the message.
type KeyPart struct {
	// Path is the field path as written in the directive, such as "Meta.ID".
	Path string
	// Hops is the field selection from the message, one field per hop,
	// including the embedded fields a promoted field is reached through.
	Hops []Hop
	// Type is the key field's Go type.
	Type Type
	Kind KeyKind
	// Bits and Unsigned are the width and signedness of a KeyInt part's Go
	// type (int, uint and uintptr count as 64 bits); zero for other kinds.
	Bits     int
	Unsigned bool
	// GoValue is the Go type the value is converted to before it is sent
	// (string, int64, uint64, [16]byte); empty when Type is that already.
	GoValue string
	// Column is the name of the inbox column the part is stored in; the SQL
	// emitter decides its type from the Go facts above.
	Column string
	// Null says how a nullable part represents NULL; nil for a required
	// part.
	Null *Null
	// AllowZero: 0 is a real value of this integer part (zero= in the
	// directive); otherwise 0, what an unset field holds, is an invalid key.
	AllowZero bool
}

// FitsInt64 reports whether every value of an integer part fits an int64:
// the signed integers and uint8 to uint32.
func (p KeyPart) FitsInt64() bool { return p.Kind == KeyInt && !(p.Unsigned && p.Bits >= 64) }

// Null describes a nullable key part: a pointer, a database/sql Null type or
// a pgtype type.
type Null struct {
	// Pointer: the part is *T and nil is NULL. Otherwise the part is a
	// struct whose Valid field is false for NULL and whose ValueField holds
	// the value.
	Pointer    bool
	ValueField string
}

// Hop selects one field.
type Hop struct {
	Field string
	// Pointer is true when the field's type is a pointer that must be
	// checked for nil before the next hop.
	Pointer bool
	// Elem is the type a pointer hop points to, which the generated tests
	// allocate when they build a message; nil for the other hops.
	Elem *Type
}

// TypeKind is the shape of a Type.
type TypeKind int

const (
	Basic TypeKind = iota
	Named
	Pointer
	Slice
	Array
	Map
)

// Type is a Go type expression as the emitted code spells it.
type Type struct {
	Kind TypeKind
	// Name of a Basic or Named type.
	Name string
	// PkgPath and PkgName of a Named type; empty for predeclared types.
	PkgPath string
	PkgName string
	// Args are the type arguments of an instantiated Named type.
	Args []Type
	// Elem of a Pointer, Slice, Array or Map; Key of a Map; Len of an Array.
	Elem *Type
	Key  *Type
	Len  int64
}

// Deref returns the element of a pointer type, or t itself.
func (t Type) Deref() Type {
	if t.Kind == Pointer {
		return *t.Elem
	}
	return t
}

// Inbox is the schema of a consumer's inbox as migrations leave it: what
// decides whether a new handler definition needs a new migration.
type Inbox struct {
	Consumer string
	Table    string
	Key      []Column
	Unique   Unique
	// Guard is the entity column of the stale-message guard's versions
	// table, nil without a guard.
	Guard *Column
	// Result is the SQL type of the result column: ResultJSON (also when
	// empty), or ResultJSONB in an inbox created before idemgen stored
	// results as json, whose schema line has no result= field. In the
	// schema a handler without a result wants, it is empty: a new inbox
	// gets json, an existing one keeps its column.
	Result string
	// Partition is the bucket of a partitioned inbox (model.Partition), ""
	// for one that is not partitioned. A partitioned inbox has the bucket
	// column after Key, in its unique key, and no index on created_at: its
	// partitions are dropped whole.
	Partition string
	// Retention is the index the purge finds expired rows by:
	// RetentionBTree (also when empty), or RetentionBRIN in an inbox created
	// before idemgen indexed created_at with a B-tree, whose schema line has
	// no retention= field.
	Retention string
}

// The indexes of an inbox's created_at, which the purge reads. A BRIN index
// stops finding old rows once purged pages are reused by new ones (each
// range's summary then spans old and new), and cannot give the rows in
// order, so the purge of a large inbox scanned the table; a B-tree gives the
// oldest rows first and stops after a batch.
const (
	RetentionBTree = "btree"
	RetentionBRIN  = "brin"
)

// RetentionIndex is the kind of the index on created_at.
func (in Inbox) RetentionIndex() string {
	if in.Retention == "" {
		return RetentionBTree
	}
	return in.Retention
}

// The types of an inbox's result column. json keeps the text encoding/json
// wrote, so it holds every result (jsonb refuses \u0000, which a Go string
// with a NUL character encodes to).
const (
	ResultJSON  = "json"
	ResultJSONB = "jsonb"
)

// ResultType is the SQL type of the result column.
func (in Inbox) ResultType() string {
	if in.Result == "" {
		return ResultJSON
	}
	return in.Result
}

// ExternalInbox is the schema of a ModeExternal consumer's table as
// migrations leave it: its rows are claims keyed by the idempotency key
// (idem_key, the primary key), with the typed key parts beside it for people
// and audits, a status, a fence, attempts, a lease and the result.
type ExternalInbox struct {
	Consumer string
	Table    string
	Key      []Column
}

// Column is a column of an inbox's key. Type is its SQL type as migrations
// record it (text, bigint, uuid, ...), which the SQL emitter derives from the
// key part's Go facts.
type Column struct {
	Name     string
	Type     string
	Nullable bool
}

// Unique is how an inbox enforces one row per key.
type Unique string

const (
	// PrimaryKey on the key columns: every part is required.
	PrimaryKey Unique = "pkey"
	// PartialIndexes: one partial unique index per null pattern of the
	// nullable parts, so that (a, NULL) collides with (a, NULL) only.
	PartialIndexes Unique = "partial"
	// NullsNotDistinct: one UNIQUE NULLS NOT DISTINCT constraint
	// (PostgreSQL 15 and newer).
	NullsNotDistinct Unique = "nulls-not-distinct"
)

// Nullable returns the key columns that may be NULL.
func (in Inbox) Nullable() []Column {
	var cols []Column
	for _, c := range in.Key {
		if c.Nullable {
			cols = append(cols, c)
		}
	}
	return cols
}

// The Go files idemgen writes into a package, and their first line (the
// migrations' are the migrate package's).
const (
	// GoHeader is the first line of every generated Go file.
	GoHeader = "// Code generated by idemgen. DO NOT EDIT."
	// WrapperFile is the generated Go file of a package.
	WrapperFile = "idem_gen.go"
	// TestFile is the generated test file of a package, beside WrapperFile.
	TestFile = "idem_gen_test.go"
)
