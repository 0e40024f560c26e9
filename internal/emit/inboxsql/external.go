package inboxsql

import (
	"fmt"
	"strings"

	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// ExternalSchema returns the schema of the claims table a mode=external
// handler h needs: its key columns with the SQL types of their Go facts.
func ExternalSchema(h model.Handler) model.ExternalInbox {
	in := model.ExternalInbox{Consumer: h.Consumer, Table: h.Table}
	for _, k := range h.Key {
		in.Key = append(in.Key, model.Column{Name: k.Column, Type: ColumnType(k), Nullable: k.Null != nil})
	}
	return in
}

// externalNames are the names of the objects of a claims table, unquoted:
// like the inbox's, each within PostgreSQL's limit and distinct from the
// others also once cut short (Identifier hashes the whole name into a long
// one).
type externalNames struct {
	base, pkey, statusCheck, leaseIndex, createdIndex string
}

func namesOfExternal(in model.ExternalInbox) externalNames {
	_, base := split(in.Table)
	return externalNames{
		base:         base,
		pkey:         Identifier(base, "pkey"),
		statusCheck:  Identifier(base, "status_check"),
		leaseIndex:   Identifier(base, "lease_until_idx"),
		createdIndex: Identifier(base, "created_at_idx"),
	}
}

// ExternalObjectNames lists the names of the objects in's migration creates
// in its schema, unquoted: the table, its constraints and its indexes.
func ExternalObjectNames(in model.ExternalInbox) []string {
	n := namesOfExternal(in)
	return []string{n.base, n.pkey, n.statusCheck, n.leaseIndex, n.createdIndex}
}

// CreateExternal renders the SQL of the migration that creates the claims
// table in: what follows the header migrate writes. The result column is
// json, as in a tx inbox: jsonb refuses a result holding \u0000, and the
// provider's effect would then have happened without the key ever being
// recorded done.
func CreateExternal(in model.ExternalInbox) []byte {
	n := namesOfExternal(in)
	d := externalCreateData{Consumer: in.Consumer, Table: TableName(in.Table),
		LeaseIndex: Quote(n.leaseIndex), CreatedIndex: Quote(n.createdIndex)}
	type column struct{ name, typ, rest string }
	cols := []column{{"idem_key", "text", "NOT NULL"}}
	for _, c := range in.Key {
		rest := "NOT NULL"
		if c.Nullable {
			rest = ""
		}
		cols = append(cols, column{Quote(c.Name), c.Type, rest})
	}
	cols = append(cols,
		column{"fingerprint", "bytea", "NOT NULL"},
		column{"status", "text", "NOT NULL"},
		column{"fence", "bigint", "NOT NULL"},
		column{"attempts", "integer", "NOT NULL"},
		column{"lease_until", "timestamptz", ""},
		column{"result", model.ResultJSON, ""},
		column{"created_at", "timestamptz", "NOT NULL DEFAULT now()"},
		column{"updated_at", "timestamptz", "NOT NULL DEFAULT now()"},
		column{"done_at", "timestamptz", ""},
	)
	nameWidth, typeWidth := 0, 0
	for _, c := range cols {
		nameWidth = max(nameWidth, len(c.name))
		typeWidth = max(typeWidth, len(c.typ))
	}
	for _, c := range cols {
		line := fmt.Sprintf("%-*s %-*s %s", nameWidth, c.name, typeWidth, c.typ, c.rest)
		d.Lines = append(d.Lines, strings.TrimRight(line, " "))
	}
	d.Lines = append(d.Lines,
		"CONSTRAINT "+Quote(n.pkey)+" PRIMARY KEY (idem_key)",
		"CONSTRAINT "+Quote(n.statusCheck)+" CHECK (status IN ('running', 'released', 'done'))",
	)
	return []byte(render("external.sql.tmpl", d))
}

type externalCreateData struct {
	Consumer     string
	Table        string
	Lines        []string
	LeaseIndex   string
	CreatedIndex string
}

// AlterExternal renders the SQL of the migration that makes the change c
// from prev's claims table to next: what follows the header migrate writes.
func AlterExternal(prev, next model.ExternalInbox, c migrate.ExternalChange) []byte {
	t := TableName(next.Table)
	d := alterData{}
	var summary, locks []string
	for _, col := range c.DropNotNull {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", t, Quote(col.Name)))
		summary = append(summary, "makes the key part "+col.Name+" nullable")
	}
	for _, col := range c.Widen {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", t, Quote(col.Name), col.Type))
		summary = append(summary, fmt.Sprintf("widens the key part %s from %s to %s", col.Name, c.Old[col.Name].Type, col.Type))
		locks = addLock(locks, "rewrites the table under ACCESS EXCLUSIVE")
	}
	for _, col := range c.Widen {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", t, Quote(col.Name), c.Old[col.Name].Type))
	}
	for _, col := range c.DropNotNull {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", t, Quote(col.Name)))
	}
	d.Summary = summaryLines(fmt.Sprintf("Changes the claims of consumer %s (mode=external): %s.", next.Consumer, strings.Join(summary, "; ")), locks)
	return []byte(render("alter.sql.tmpl", d))
}
