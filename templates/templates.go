// Package templates embeds the SQL templates idemgen renders: the
// migrations that create and change an inbox table, the claims table of a
// mode=external consumer and the fingerprint column of a mode=entity one.
// (The statements the runtime runs against them it builds itself, in
// idem/idemimpl/statements.go.)
package templates

import "embed"

// FS holds the *.sql.tmpl files of this folder.
//
//go:embed *.sql.tmpl
var FS embed.FS
