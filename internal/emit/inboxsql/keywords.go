package inboxsql

// keywords are the PostgreSQL keywords that idemgen quotes when a name it
// writes into SQL equals one: the categories that cannot stand unquoted as a
// table, column or index name in every position. The lists are the reserved,
// type_func_name and col_name keywords of PostgreSQL 15's
// src/include/parser/kwlist.h (what pg_get_keywords() of a 15 server reports
// with catcode R, T and C), plus the words PostgreSQL 16 and 17 added as
// keywords that could land in those categories. Quoting a name that needs no
// quotes is harmless (a quoted lower-case name is the same name), so the list
// errs on the side of quoting; unreserved keywords (key, version, name, ...)
// are valid names everywhere and stay unquoted.
//
// A name's quoting decides the bytes of a migration, and a committed
// migration is never rewritten: words may be added to this list only for
// names idemgen could not have written before.
var keywords = wordSet(
	// Reserved (kwlist.h RESERVED_KEYWORD).
	"all", "analyse", "analyze", "and", "any", "array", "as", "asc",
	"asymmetric", "both", "case", "cast", "check", "collate", "column",
	"constraint", "create", "current_catalog", "current_date", "current_role",
	"current_time", "current_timestamp", "current_user", "default",
	"deferrable", "desc", "distinct", "do", "else", "end", "except", "false",
	"fetch", "for", "foreign", "from", "grant", "group", "having", "in",
	"initially", "intersect", "into", "lateral", "leading", "limit",
	"localtime", "localtimestamp", "not", "null", "offset", "on", "only", "or",
	"order", "placing", "primary", "references", "returning", "select",
	"session_user", "some", "symmetric", "table", "then", "to", "trailing",
	"true", "union", "unique", "user", "using", "variadic", "when", "where",
	"window", "with",
	// Type or function names (TYPE_FUNC_NAME_KEYWORD).
	"authorization", "binary", "collation", "concurrently", "cross",
	"current_schema", "freeze", "full", "ilike", "inner", "is", "isnull",
	"join", "left", "like", "natural", "notnull", "outer", "overlaps", "right",
	"similar", "tablesample", "verbose",
	// Column names (COL_NAME_KEYWORD).
	"between", "bigint", "bit", "boolean", "char", "character", "coalesce",
	"dec", "decimal", "exists", "extract", "float", "greatest", "grouping",
	"inout", "int", "integer", "interval", "least", "national", "nchar",
	"none", "normalize", "nullif", "numeric", "out", "overlay", "position",
	"precision", "real", "row", "setof", "smallint", "substring", "time",
	"timestamp", "treat", "trim", "values", "varchar", "xmlattributes",
	"xmlconcat", "xmlelement", "xmlexists", "xmlforest", "xmlnamespaces",
	"xmlparse", "xmlpi", "xmlroot", "xmlserialize", "xmltable",
	// PostgreSQL 16 and 17.
	"json", "json_array", "json_arrayagg", "json_exists", "json_object",
	"json_objectagg", "json_query", "json_scalar", "json_serialize",
	"json_table", "json_value", "merge_action", "system_user",
)

func wordSet(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}
