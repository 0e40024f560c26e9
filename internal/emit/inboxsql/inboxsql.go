// Package inboxsql renders the SQL of a handler's inbox: its goose migration
// and the statements the runtime runs against it, from the templates in the
// repository's templates folder.
package inboxsql

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"text/template"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/templates"
)

var tmpl = template.Must(template.ParseFS(templates.FS, "*.sql.tmpl"))

// Statements are the SQL texts of one inbox, as idem.Table wants them.
type Statements struct {
	Claim, Complete, Lookup, Purge string
}

// StatementsFor renders the statements of h's inbox.
func StatementsFor(h model.Handler) Statements {
	d := dataFor(h)
	return Statements{
		Claim:    render("claim", d),
		Complete: render("complete", d),
		Lookup:   render("lookup", d),
		Purge:    render("purge", d),
	}
}

// Migration renders the goose migration that creates h's inbox.
func Migration(h model.Handler) []byte {
	return []byte(render("inbox.sql.tmpl", dataFor(h)))
}

// FileName is the name of h's migration at version.
func FileName(h model.Handler, version int64) string {
	return fmt.Sprintf("%05d_%s.sql", version, strings.ReplaceAll(h.Table, ".", "_"))
}

type data struct {
	Consumer     string
	Table        string
	Columns      []string
	KeyColumns   string // key_a, key_b
	KeyParams    string // $1, $2
	Next         string // the placeholder after the key's
	Match        string // key_a = $1 AND key_b = $2
	PrimaryKey   string
	StatusCheck  string
	CreatedIndex string
}

func dataFor(h model.Handler) data {
	d := data{Consumer: h.Consumer, Table: h.Table}
	base := h.Table[strings.LastIndexByte(h.Table, '.')+1:]
	d.PrimaryKey = Identifier(base, "pkey")
	d.StatusCheck = Identifier(base, "status_check")
	d.CreatedIndex = Identifier(base, "created_at_idx")

	var cols, params, match []string
	type column struct{ name, typ, rest string }
	var all []column
	for i, k := range h.Key {
		cols = append(cols, k.Column)
		params = append(params, fmt.Sprintf("$%d", i+1))
		match = append(match, fmt.Sprintf("%s = $%d", k.Column, i+1))
		all = append(all, column{k.Column, k.SQLType, "NOT NULL"})
	}
	d.KeyColumns = strings.Join(cols, ", ")
	d.KeyParams = strings.Join(params, ", ")
	d.Match = strings.Join(match, " AND ")
	d.Next = fmt.Sprintf("$%d", len(h.Key)+1)

	all = append(all,
		column{"fingerprint", "bytea", "NOT NULL"},
		column{"status", "text", "NOT NULL DEFAULT 'running'"},
		column{"result", "jsonb", ""},
		column{"attempts", "integer", "NOT NULL DEFAULT 1"},
		column{"created_at", "timestamptz", "NOT NULL DEFAULT now()"},
		column{"completed_at", "timestamptz", ""},
	)
	nameWidth, typeWidth := 0, 0
	for _, c := range all {
		nameWidth = max(nameWidth, len(c.name))
		typeWidth = max(typeWidth, len(c.typ))
	}
	for _, c := range all {
		line := fmt.Sprintf("%-*s %-*s %s", nameWidth, c.name, typeWidth, c.typ, c.rest)
		d.Columns = append(d.Columns, strings.TrimRight(line, " "))
	}
	return d
}

// MaxIdentifier is PostgreSQL's limit on identifier length, in bytes.
const MaxIdentifier = 63

// Identifier joins base and suffix with "_". A name over PostgreSQL's limit
// would be truncated silently by the server, so it is shortened here instead,
// keeping it unique with a hash of the full name.
func Identifier(base, suffix string) string {
	name := base + "_" + suffix
	if len(name) <= MaxIdentifier {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "_" + hex.EncodeToString(sum[:4]) + "_" + suffix
	return base[:MaxIdentifier-len(tail)] + tail
}

func render(name string, d data) string {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, d); err != nil {
		// The templates are fixed and the data is plain strings: an
		// error here is a bug in idemgen, not in the user's input.
		panic(fmt.Sprintf("idemgen: render %s: %v", name, err))
	}
	return b.String()
}
