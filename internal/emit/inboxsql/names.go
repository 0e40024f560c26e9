package inboxsql

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/model"
)

// Quote returns name as SQL writes it. A plain lower-case name
// ([a-z_][a-z0-9_]*, at most MaxIdentifier bytes) that is not one of the
// keywords stays as it is, so the SQL of every name that needs no quotes is
// what idemgen always wrote; any other name is double-quoted, with its
// double quotes doubled.
func Quote(name string) string {
	if IsPlain(name) && !keywords[name] {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// IsPlain reports whether name is a lower-case SQL name that PostgreSQL reads
// unquoted as itself, unless it is a keyword: [a-z_][a-z0-9_]*, at most
// MaxIdentifier bytes.
func IsPlain(name string) bool {
	if name == "" || len(name) > MaxIdentifier || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// IsKeyword reports whether name is a PostgreSQL keyword that Quote quotes.
func IsKeyword(name string) bool { return keywords[name] }

// TableName returns a table= name (name or schema.name) as SQL writes it,
// each part quoted where it needs to be.
func TableName(table string) string {
	schema, base := split(table)
	return qualify(schema, base)
}

// qualify writes the object name in schema ("" for the search path's).
func qualify(schema, name string) string {
	if schema == "" {
		return Quote(name)
	}
	return Quote(schema) + "." + Quote(name)
}

// split cuts a table= name into its schema ("" when there is none) and the
// table's own name.
func split(table string) (schema, base string) {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i], table[i+1:]
	}
	return "", table
}

// VersionsTable is the guard's versions table of in, as SQL writes it.
func VersionsTable(in model.Inbox) string { return names(in).versionsTable }

// inboxNames are the names of an inbox's objects: the constraints' and
// indexes' unquoted, the tables' as SQL writes them.
type inboxNames struct {
	schema        string // "" for the search path's
	base          string // the table's own name
	table         string // SQL
	versions      string // the versions table's own name
	versionsTable string // SQL
	pkey          string
	unique        string
	statusCheck   string
	createdIndex  string // the BRIN index on created_at of older inboxes
	// retentionIndex is the B-tree index on created_at that the purge reads.
	retentionIndex string
	// partial are the partial unique indexes, by null pattern of the
	// nullable parts (bit j: nullable part j is NULL).
	partial []string
}

// ObjectNames lists the names of the objects in's migrations create or may
// create in its schema, unquoted: the table, the versions table, the
// constraints and the indexes. They are distinct and at most MaxIdentifier
// bytes each.
func ObjectNames(in model.Inbox) []string {
	n := names(in)
	return append([]string{n.base, n.versions, n.pkey, n.unique, n.statusCheck, n.createdIndex, n.retentionIndex}, n.partial...)
}

// names derives the names of in's objects. The table and its indexes share
// the schema's namespace of relations, and constraints need distinct names
// too, so every name must differ from every other one, also once PostgreSQL
// would cut it at 63 bytes. Identifier keeps each within the limit; the
// names are then reserved one by one, and a name already taken gets a hash of
// what it names. The fixed names are reserved first, and all of them whether
// or not the inbox has a guard and whatever its unique strategy, so that a
// later migration that adds a guard or changes the strategy derives the same
// names for what an earlier one created: a DROP must name the object as its
// CREATE did.
func names(in model.Inbox) inboxNames {
	schema, base := split(in.Table)
	n := inboxNames{schema: schema, base: base, table: TableName(in.Table)}
	taken := map[string]bool{base: true}
	reserve := func(suffix, identity string, hashed bool) string {
		name := Identifier(base, suffix)
		if hashed {
			name = Identifier(base, withHash(suffix, identity, 0))
		}
		for salt := 1; taken[name]; salt++ {
			name = Identifier(base, withHash(suffix, identity, salt))
		}
		taken[name] = true
		return name
	}
	n.versions = reserve("versions", "versions", false)
	n.versionsTable = qualify(schema, n.versions)
	n.pkey = reserve("pkey", "pkey", false)
	n.unique = reserve("key", "key", false)
	n.statusCheck = reserve("status_check", "status_check", false)
	n.createdIndex = reserve("created_at_idx", "created_at_idx", false)
	n.retentionIndex = reserve("retention_idx", "retention_idx", false)

	// A partial index is named by the parts that are NULL in its pattern,
	// without their key_ prefix. Two patterns can spell the same name
	// (key_order, key_line and key_order_line): both then carry a hash of
	// their columns, so that neither looks like the plain name.
	suffixes, identities := partialSuffixes(in)
	count := map[string]int{}
	for _, s := range suffixes {
		count[Identifier(base, s)]++
	}
	for i, s := range suffixes {
		n.partial = append(n.partial, reserve(s, identities[i], count[Identifier(base, s)] > 1))
	}
	return n
}

// partialSuffixes returns the name suffix of each partial unique index, by
// null pattern, and what each index is (its NULL columns), which the hash of
// a colliding name is taken of.
func partialSuffixes(in model.Inbox) (suffixes, identities []string) {
	if in.Unique != model.PartialIndexes {
		return nil, nil
	}
	nullable := in.Nullable()
	for pattern := range 1 << len(nullable) {
		var short, cols []string
		for j, c := range nullable {
			if pattern&(1<<j) != 0 {
				short = append(short, strings.TrimPrefix(c.Name, "key_"))
				cols = append(cols, c.Name)
			}
		}
		if len(short) == 0 {
			suffixes, identities = append(suffixes, "key_idx"), append(identities, "key_idx")
			continue
		}
		suffixes = append(suffixes, "key_null_"+strings.Join(short, "_")+"_idx")
		identities = append(identities, "key_null:"+strings.Join(cols, ","))
	}
	return suffixes, identities
}

// withHash puts a short hash of identity (and salt, when it is not 0) into
// suffix, before its last word: key_null_order_line_idx becomes
// key_null_order_line_1a2b3c4d_idx.
func withHash(suffix, identity string, salt int) string {
	if salt != 0 {
		identity += fmt.Sprintf("#%d", salt)
	}
	h := shortHash(identity)
	if i := strings.LastIndexByte(suffix, '_'); i > 0 {
		return suffix[:i] + "_" + h + suffix[i:]
	}
	return suffix + "_" + h
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// MaxIdentifier is PostgreSQL's limit on identifier length, in bytes.
const MaxIdentifier = 63

// Identifier joins base and suffix with "_". PostgreSQL would cut a name
// over its limit silently, and two long names could end up the same, so a
// longer name is shortened here instead, with a hash of the whole name in it:
// base cut short, the hash, then suffix; or, when suffix alone leaves no room,
// the start of the whole name and the hash. The result is at most
// MaxIdentifier bytes and never splits a UTF-8 sequence.
func Identifier(base, suffix string) string {
	name := base + "_" + suffix
	if len(name) <= MaxIdentifier {
		return name
	}
	hash := "_" + shortHash(name)
	if tail := hash + "_" + suffix; len(tail) <= MaxIdentifier {
		return cut(base, MaxIdentifier-len(tail)) + tail
	}
	return cut(name, MaxIdentifier-len(hash)) + hash
}

// cut returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
