// Package templates embeds the SQL templates idemgen renders: the inbox
// migration and the statements the runtime runs against an inbox table, and
// the same for the claims table of a mode=external consumer.
package templates

import "embed"

// FS holds the *.sql.tmpl files of this folder.
//
//go:embed *.sql.tmpl
var FS embed.FS
