// Package generate turns the model into the output set: idem_gen.go and
// idem_gen_test.go for every package with handlers, the migrations each
// migrations folder lacks, and the generated files no longer needed. It is a
// pure function of the model and the folders as read; writing and checking
// are the output package's, and the folders are the migrate package's, which
// generate gives the emitters' renderers.
package generate

import (
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/emit/gotest"
	"github.com/idemgen/idemgen/internal/emit/gowrap"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
	"github.com/idemgen/idemgen/migrations"
)

// Options change how Generate treats the migrations folders.
type Options struct {
	// Rehash records the folders' migrations in their checksum files as
	// they are, instead of refusing edited or out-of-order ones.
	Rehash bool
	// AcceptResultChange lists the consumers whose result type may change
	// in a way the results stored before cannot be decoded through: their
	// record of result shapes is replaced, and those results' duplicates
	// will be dead-lettered.
	AcceptResultChange []string
	// Outbox holds the runtime's outbox migrations, which the folders of
	// handlers that take an *idem.Outbox get copies of; nil is
	// migrations.FS. Tests give another, to play a runtime that gained a
	// migration.
	Outbox fs.FS
}

// inboxes is the kind of a mode=tx consumer's inbox chain, and externals
// that of a mode=external consumer's claims table, both rendered by
// inboxsql.
var (
	inboxes   = migrate.InboxKind{Create: inboxsql.Create, Alter: inboxsql.Alter}
	externals = migrate.ExternalKind{Create: inboxsql.CreateExternal, Alter: inboxsql.AlterExternal}
	entities  = migrate.EntityKind{Create: inboxsql.CreateEntity}
)

// Generate returns the files of prog. dirs are its migrations folders
// (prog.MigrationsDirs) as read. Errors in the returned list mean the set
// must not be written (it is still complete enough to diff).
func Generate(prog model.Program, dirs []migrate.Dir, opts Options) (*output.Set, *diag.List) {
	set, diags := output.NewSet(), &diag.List{}
	src := opts.Outbox
	if src == nil {
		src = migrations.FS
	}
	outbox, err := migrate.NewOutboxKind(src)
	if err != nil {
		diags.Errorf(diag.Pos{}, "%v", err)
		return set, diags
	}
	chains := map[string]map[migrate.ChainID][]string{}
	for _, dir := range dirs {
		checkEntityTables(prog, dir, diags)
		chains[dir.Path] = dir.Plan(request(prog, dir.Path, outbox, opts), set, diags)
	}

	for _, pkg := range prog.Packages {
		if pkg.Unread {
			continue
		}
		pkg = withMigrations(pkg, chains)
		emitters := []struct {
			name string
			emit func(model.Package) ([]byte, error)
		}{
			{model.WrapperFile, gowrap.File},
			{model.TestFile, gotest.File},
		}
		for _, e := range emitters {
			path := filepath.Join(pkg.Dir, e.name)
			if len(pkg.Handlers) == 0 {
				if slices.Contains(pkg.Generated, e.name) {
					set.Orphans = append(set.Orphans, path)
				}
				continue
			}
			src, err := e.emit(pkg)
			if err != nil {
				diags.Errorf(diag.Pos{}, "%v", err)
				continue
			}
			set.Files[path] = src
		}
	}
	return set, diags
}

// withMigrations returns pkg with the Migration and OutboxMigration of its
// handlers filled from the planned chains of their folders. chains maps a
// folder to its chains' files, oldest first.
func withMigrations(pkg model.Package, chains map[string]map[migrate.ChainID][]string) model.Package {
	pkg.Handlers = slices.Clone(pkg.Handlers)
	for i, h := range pkg.Handlers {
		first := func(id migrate.ChainID) string {
			files := chains[h.MigrationsDir][id]
			if len(files) == 0 {
				return ""
			}
			rel, err := filepath.Rel(pkg.Dir, filepath.Join(h.MigrationsDir, files[0]))
			if err != nil {
				return ""
			}
			return filepath.ToSlash(rel)
		}
		switch {
		case h.Natural():
		case h.EntityMode():
			h.Migration = first(migrate.ChainID{Kind: entities.Name(), Name: h.Consumer})
		case h.External():
			h.Migration = first(migrate.ChainID{Kind: externals.Name(), Name: h.Consumer})
		default:
			h.Migration = first(migrate.ChainID{Kind: inboxes.Name(), Name: h.Consumer})
		}
		if h.Outbox {
			h.OutboxMigration = first(migrate.ChainID{Kind: migrate.OutboxKind{}.Name(), Name: migrate.OutboxChain})
		}
		pkg.Handlers[i] = h
	}
	return pkg
}

// request is what prog wants of the migrations folder at path: an inbox
// chain per mode=tx handler whose migrations go there, a claims table chain
// per mode=external one, and the outbox chain when one of them takes an
// *idem.Outbox; a mode=entity one wants the fingerprint column on its
// business table, a mode=natural one nothing. The kinds are listed in the
// order their new migrations take versions: inboxes, claims tables,
// fingerprint columns, then the outbox.
func request(prog model.Program, path string, outbox migrate.OutboxKind, opts Options) migrate.Request {
	req := migrate.Request{Kinds: []migrate.Kind{inboxes, externals, entities, outbox}, Rehash: opts.Rehash, AcceptResultChange: opts.AcceptResultChange}
	publishes := false
	for _, pkg := range prog.Packages {
		if !pkg.Unread {
			// The consumers of a package idemgen could not read are not
			// known to be gone.
			req.Packages = append(req.Packages, pkg.Path)
		}
		for _, r := range pkg.Retired {
			req.Retired = append(req.Retired, migrate.Retired{Consumer: r.Consumer, Package: pkg.Path})
		}
		for _, h := range pkg.Handlers {
			if h.MigrationsDir != path {
				continue
			}
			switch {
			case h.Natural():
				// Nothing records its messages: no migration.
				continue
			case h.EntityMode():
				req.Wants = append(req.Wants, migrate.Want{Kind: entities, Name: h.Consumer, State: inboxsql.EntitySchema(h), Owner: h.Package, Pos: h.Pos, ModePos: h.ModePos})
				if h.Outbox && !publishes {
					publishes = true
					req.Wants = append(req.Wants, migrate.Want{Kind: outbox, Name: migrate.OutboxChain, State: outbox.Steps(), Pos: h.Pos})
				}
				continue
			case h.External():
				req.Wants = append(req.Wants, migrate.Want{Kind: externals, Name: h.Consumer, State: inboxsql.ExternalSchema(h), Owner: h.Package, Pos: h.Pos, ModePos: h.ModePos})
			default:
				req.Wants = append(req.Wants, migrate.Want{Kind: inboxes, Name: h.Consumer, State: inboxOf(h), Owner: h.Package, Pos: h.Pos, ModePos: h.ModePos})
			}
			req.Results = append(req.Results, migrate.Result{Consumer: h.Consumer, Shape: h.ResultShape, Pos: h.ResultPos})
			if h.Outbox && !publishes {
				publishes = true
				req.Wants = append(req.Wants, migrate.Want{Kind: outbox, Name: migrate.OutboxChain, State: outbox.Steps(), Pos: h.Pos})
			}
		}
	}
	return req
}

// inboxOf is the inbox schema h needs: the one place generate maps a handler
// to its schema. A handler without a result leaves the result column's type
// open: an inbox that has one keeps it (migrate.InboxKind.Evolve).
func inboxOf(h model.Handler) model.Inbox {
	in := inboxsql.Schema(h)
	if h.Result == nil {
		in.Result = ""
	}
	return in
}
