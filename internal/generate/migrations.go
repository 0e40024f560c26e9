package generate

import (
	"bytes"
	"cmp"
	"maps"

	"path/filepath"
	"slices"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

// folder plans the migrations of one migrations folder.
//
// A migration, once written, is never rewritten: it may have been applied.
// Each inbox migration records, in its header, the schema it leaves behind;
// a handler whose schema differs from its consumer's last recorded one gets
// a new migration when the change is additive, and is refused otherwise. New
// migrations take the next versions of the folder, in consumer order, so
// that a re-run picks the same ones. The checksum file records every
// migration, so that edits, deletions and two branches taking one version
// are caught.
type folder struct {
	dir   model.MigrationDir
	prog  model.Program
	set   *output.Set
	diags *diag.List
	opts  Options

	last     int64           // highest version in the folder
	reported map[string]bool // files already reported as edited
	content  map[string][]byte
	consumer map[string]string // file name → consumer, for the checksum file
}

func (f *folder) at(name string) diag.Pos {
	return diag.Pos{File: filepath.Join(f.dir.Path, name), Line: 1, Col: 1}
}

func (f *folder) plan() {
	f.reported = map[string]bool{}
	f.content = map[string][]byte{}
	f.consumer = map[string]string{}
	byVersion := map[int64]string{}
	for _, file := range f.dir.Files {
		f.content[file.Name] = file.Content
		if file.Consumer != "" {
			f.consumer[file.Name] = file.Consumer
		}
		if file.Version == 0 {
			continue
		}
		if other, dup := byVersion[file.Version]; dup {
			f.diags.Errorf(f.at(file.Name), "migrations %s and %s share version %d, which goose refuses (two branches took one version?); renumber the one that was not applied yet",
				other, file.Name, file.Version)
		}
		byVersion[file.Version] = file.Name
		f.last = max(f.last, file.Version)
	}

	recorded := f.verifySum()
	chains := f.chains()
	handlers := f.handlers()
	for _, h := range handlers {
		if f.ownedElsewhere(h, chains[h.Consumer], recorded) {
			continue
		}
		f.evolve(h, chains[h.Consumer])
	}
	f.removedConsumers(chains, handlers, recorded)
	f.results(handlers)
	f.writeSum(recorded, handlers)
}

// verifySum checks the folder against its checksum file and returns the
// recorded entries by file name.
func (f *folder) verifySum() map[string]sumEntry {
	recorded := map[string]sumEntry{}
	if f.dir.Sum == nil {
		return recorded
	}
	sumPos := f.at(model.SumFile)
	entries, err := parseSum(f.dir.Sum)
	if err != nil {
		if !f.opts.Rehash {
			f.diags.Errorf(sumPos, "%s is damaged: %v; check the folder's migrations, then run idemgen -rehash to record them as they are", model.SumFile, err)
		}
		return recorded
	}
	var lastRecorded int64
	for _, e := range entries {
		recorded[e.name] = e
		if v := versionOf(f.dir, e.name); v > lastRecorded {
			lastRecorded = v
		}
	}
	if f.opts.Rehash {
		return recorded
	}
	for _, e := range entries {
		content, ok := f.content[e.name]
		switch {
		case !ok:
			f.diags.Errorf(sumPos, "migration %s, recorded in %s, was deleted; it may have been applied: restore it (if it never was, run idemgen -rehash)", e.name, model.SumFile)
		case hashOf(content) != e.hash:
			f.reported[e.name] = true
			f.diags.Errorf(f.at(e.name), "migration %s changed after it was recorded in %s; it may have been applied, so restore it and put the change in a new migration (if it never was applied anywhere, run idemgen -rehash)",
				e.name, model.SumFile)
		}
	}
	for _, file := range f.dir.Files {
		if _, ok := recorded[file.Name]; ok || file.Version == 0 || file.Version > lastRecorded {
			continue
		}
		f.diags.Errorf(f.at(file.Name), "migration %s (version %d) is new but not newer than the recorded history (up to version %d): two branches took one version, or it was inserted below applied migrations; renumber it after %05d",
			file.Name, file.Version, lastRecorded, lastRecorded)
	}
	return recorded
}

func versionOf(dir model.MigrationDir, name string) int64 {
	for _, file := range dir.Files {
		if file.Name == name {
			return file.Version
		}
	}
	return 0
}

// chains returns each consumer's inbox migrations in version order, after
// checking that every one is exactly what idemgen wrote.
func (f *folder) chains() map[string][]model.MigrationFile {
	chains := map[string][]model.MigrationFile{}
	for _, file := range f.dir.Files {
		if file.Consumer != "" {
			chains[file.Consumer] = append(chains[file.Consumer], file)
		}
	}
	for consumer, chain := range chains {
		slices.SortFunc(chain, func(a, b model.MigrationFile) int { return cmp.Compare(a.Version, b.Version) })
		var prev *model.Inbox
		for _, file := range chain {
			if file.Schema == nil {
				f.diags.Errorf(f.at(file.Name), "the idemgen header of %s is damaged (%s); restore the file", file.Name, file.SchemaErr)
				delete(chains, consumer)
				break
			}
			var want []byte
			if prev == nil {
				want = inboxsql.Create(*file.Schema)
			} else if change, err := model.Evolve(*prev, *file.Schema); err == nil {
				want = inboxsql.Alter(*prev, *file.Schema, change)
			}
			path := filepath.Join(f.dir.Path, file.Name)
			if want != nil {
				f.set.Files[path] = want
			}
			if !bytes.Equal(want, file.Content) && !f.reported[file.Name] {
				f.reported[file.Name] = true
				f.diags.Errorf(f.at(file.Name), "migration %s of consumer %s is not what idemgen wrote (it was edited); it may have been applied: restore it, and let idemgen write the change as a new migration",
					file.Name, consumer)
			}
			prev = file.Schema
		}
	}
	return chains
}

// handlers returns the run's handlers that write to this folder, in
// consumer order.
func (f *folder) handlers() []model.Handler {
	var hs []model.Handler
	for _, pkg := range f.prog.Packages {
		for _, h := range pkg.Handlers {
			if h.MigrationsDir == f.dir.Path {
				hs = append(hs, h)
			}
		}
	}
	slices.SortFunc(hs, func(a, b model.Handler) int { return cmp.Compare(a.Consumer, b.Consumer) })
	return hs
}

// evolve gives h's consumer the migration it lacks, if any.
func (f *folder) evolve(h model.Handler, chain []model.MigrationFile) {
	want := inboxsql.Schema(h)
	var content []byte
	var name string
	if len(chain) == 0 {
		f.last++
		name, content = inboxsql.FileName(want, f.last, ""), inboxsql.Create(want)
	} else {
		current := *chain[len(chain)-1].Schema
		if h.Result == nil && current.ResultType() == model.ResultJSONB {
			// A handler without a result stores none: its jsonb column
			// is fine, and changing the type would rewrite the table.
			want.Result = model.ResultJSONB
		}
		if current.Equal(want) {
			return
		}
		change, err := model.Evolve(current, want)
		if err != nil {
			f.diags.Errorf(h.Pos, "consumer %s cannot keep its inbox (migration %s): %v", h.Consumer, chain[len(chain)-1].Name, err)
			return
		}
		f.last++
		name, content = inboxsql.FileName(want, f.last, change.Describe()), inboxsql.Alter(current, want, change)
	}
	f.set.Files[filepath.Join(f.dir.Path, name)] = content
	f.content[name] = content
	f.consumer[name] = h.Consumer
}

// ownedElsewhere refuses h when the folder records its consumer for another
// package that this run did not load and that has not retired it: two
// packages that share a migrations folder, each generated on its own, would
// otherwise both use the one inbox (and take its ownership in turns).
func (f *folder) ownedElsewhere(h model.Handler, chain []model.MigrationFile, recorded map[string]sumEntry) bool {
	if len(chain) == 0 {
		return false
	}
	e, ok := recorded[chain[0].Name]
	if !ok || e.pkgPath == h.Package || e.pkgPath == "unknown" || e.retired {
		return false
	}
	for _, pkg := range f.prog.Packages {
		if pkg.Path == e.pkgPath {
			// Loaded in this run: it declares the consumer too (an error
			// of its own) or gave it up, and h takes it over.
			return false
		}
	}
	f.diags.Errorf(h.Pos, "consumer %s belongs to package %s, whose inbox migration %s this migrations folder records (%s); a consumer name is one inbox, so two packages cannot share it. "+
		"Give this handler another consumer name; or, to move the consumer here, retire it in %s with \"//idem:retired consumer=%s\" and run idemgen there first",
		h.Consumer, e.pkgPath, chain[0].Name, model.SumFile, e.pkgPath, h.Consumer)
	return true
}

// removedConsumers refuses to go on when a consumer that a loaded package
// owns has lost its handler without being retired: its inbox would be
// forgotten while it may still answer redeliveries.
func (f *folder) removedConsumers(chains map[string][]model.MigrationFile, handlers []model.Handler, recorded map[string]sumEntry) {
	declared := map[string]bool{}
	for _, h := range handlers {
		declared[h.Consumer] = true
	}
	loaded, retired := map[string]bool{}, map[string]bool{}
	for _, pkg := range f.prog.Packages {
		loaded[pkg.Path] = true
		for _, r := range pkg.Retired {
			retired[r.Consumer] = true
		}
	}
	for _, consumer := range slices.Sorted(maps.Keys(chains)) {
		chain := chains[consumer]
		owner := recorded[chain[0].Name].pkgPath
		if declared[consumer] || retired[consumer] || !loaded[owner] {
			continue
		}
		f.diags.Errorf(f.at(chain[0].Name), "consumer %s of package %s has no handler any more; its inbox may still answer redeliveries, and its migrations stay. "+
			"Restore the handler, or retire the consumer on purpose with a line \"//idem:retired consumer=%s\" in package %s (the table stays until you drop it with a migration of your own)",
			consumer, owner, consumer, owner)
	}
}

// writeSum records every migration of the folder, new ones included.
func (f *folder) writeSum(recorded map[string]sumEntry, handlers []model.Handler) {
	owner := map[string]string{}
	for _, h := range handlers {
		owner[h.Consumer] = h.Package
	}
	retiredBy := map[string]string{}
	for _, pkg := range f.prog.Packages {
		for _, r := range pkg.Retired {
			retiredBy[r.Consumer] = pkg.Path
		}
	}
	var entries []sumEntry
	for _, name := range slices.Sorted(maps.Keys(f.content)) {
		e := sumEntry{name: name, hash: hashOf(f.content[name]), consumer: f.consumer[name]}
		if r, ok := recorded[name]; ok && f.reported[name] {
			// An edited migration is refused, not recorded anew.
			e.hash = r.hash
		}
		if e.consumer != "" {
			e.pkgPath = cmp.Or(owner[e.consumer], recorded[name].pkgPath)
			if e.pkgPath == "" {
				e.pkgPath = "unknown"
			}
			// Retired by its owner, it may be taken over; declared
			// again, it is owned again.
			e.retired = owner[e.consumer] == "" && (recorded[name].retired || retiredBy[e.consumer] == e.pkgPath)
		}
		entries = append(entries, e)
	}
	f.set.Files[filepath.Join(f.dir.Path, model.SumFile)] = formatSum(entries)
}
