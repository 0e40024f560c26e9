// Package model is the plain data idemgen generates from: packages, their
// annotated handlers, key parts and types, and the state of each migrations
// folder. It holds no go/ast or go/types values; the loader fills it, the
// emitters read it.
package model

import (
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/diag"
)

// Program is everything one idemgen run generates from.
type Program struct {
	// Packages are sorted by import path.
	Packages []Package
	// MigrationDirs are the folders the run's handlers write migrations to,
	// sorted by path.
	MigrationDirs []MigrationDir
}

// Package is one loaded Go package.
type Package struct {
	Path string // import path
	Name string
	Dir  string // absolute
	// Handlers are sorted by position.
	Handlers []Handler
	// Generated lists the idemgen files present in Dir before this run (base
	// names), so that those no longer needed are found.
	Generated []string
}

// Handler is one //idem:handler function or method.
type Handler struct {
	Pos  diag.Pos
	Func string // the Go name of the function or method
	// Recv is the method's receiver, nil for a function.
	Recv *Recv
	// Msg is the message parameter's type: a named struct type or a pointer
	// to one.
	Msg Type
	// Result is the handler's result type, nil when it returns only error.
	Result *Type

	Consumer string
	Table    string // SQL name, optionally schema-qualified
	Retain   time.Duration
	Key      []KeyPart
	// MigrationsDir is the absolute folder of the handler's migration.
	MigrationsDir string

	// Fixture is the function of the package's tests named by fixture=, which
	// supplies the generated tests' receiver and message; empty for none.
	Fixture string
	// Vary is the message field the generated tests change to make a message
	// with the same key and another payload; nil when there is none, and
	// NoVary says why.
	Vary   *VaryField
	NoVary string
}

// VaryField is a field of a message, outside its key, whose change changes
// the message's payload fingerprint.
type VaryField struct {
	Field string // a field of the message struct itself
	Kind  VaryKind
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
	Test        string // TestChargeIdem, in the generated test file
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
	// GoValue is the Go type the value is converted to before it is sent
	// (string, int64, uint64, [16]byte); empty when Type is that already.
	GoValue string
	// Column and SQLType describe the inbox column.
	Column  string
	SQLType string
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

// MigrationDir is the state of one migrations folder.
type MigrationDir struct {
	Path string // absolute
	// Files are the folder's .sql files, sorted by name.
	Files []MigrationFile
}

// MigrationFile is one .sql file of a migrations folder.
type MigrationFile struct {
	Name    string // base name
	Version int64  // from the NNNNN_ prefix; 0 when the name has none
	// Consumer is set for the inbox migrations idemgen wrote, from their
	// header; Content is kept for those only.
	Consumer string
	Content  []byte
}

// Markers idemgen writes into its files and reads back from disk.
const (
	// GoHeader is the first line of every generated Go file.
	GoHeader = "// Code generated by idemgen. DO NOT EDIT."
	// SQLHeader is the first line of every generated migration.
	SQLHeader = "-- Code generated by idemgen. DO NOT EDIT."
	// InboxMarker starts the second line of an inbox migration; the
	// consumer's name follows it.
	InboxMarker = "-- idemgen:inbox consumer="
	// WrapperFile is the generated Go file of a package.
	WrapperFile = "idem_gen.go"
	// TestFile is the generated test file of a package, beside WrapperFile.
	TestFile = "idem_gen_test.go"
)
