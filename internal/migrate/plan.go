package migrate

import (
	"bytes"
	"cmp"
	"maps"
	"path/filepath"
	"slices"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

// Request is what one idemgen run wants of a migrations folder.
type Request struct {
	// Kinds are the kinds of chain the folder may hold. A migration none
	// of them reads is the user's: recorded in the checksum file, never
	// changed.
	Kinds []Kind
	// Wants are the chains the run wants, each at most once.
	Wants []Want
	// Packages are the import paths of every package the run loaded, and
	// Retired the consumers they retired.
	Packages []string
	Retired  []Retired
	// Results are the result shapes of the consumers that store a result
	// in this folder's inboxes.
	Results []Result
	// Rehash records the folder's migrations in the checksum file as they
	// are, instead of refusing edited or out-of-order ones.
	Rehash bool
	// AcceptResultChange lists the consumers whose result type may change
	// in a way the results stored before cannot be decoded through.
	AcceptResultChange []string
}

// Want is a chain the run wants, and the State it wants it in.
type Want struct {
	Kind  Kind
	Name  string
	State State
	// Owner is the import path of the package that declares the chain, for
	// an owned kind; Pos is where (the handler), for the messages.
	Owner string
	Pos   diag.Pos
	// ModePos is where the handler's directive says its mode (its mode=,
	// or the directive itself), for the refusal of a switch of modes
	// (ModeKind); Pos when zero.
	ModePos diag.Pos
}

// Retired is a consumer that its package retired (//idem:retired): its
// handler is gone on purpose and its migrations stay.
type Retired struct {
	Consumer string
	Package  string
}

// Result is the JSON shape of the results a consumer's inbox stores, and
// where its handler's result type is written.
type Result struct {
	Consumer string
	Shape    *model.Shape
	Pos      diag.Pos
}

// Plan checks the folder and puts into set what the request makes of it: the
// migrations each wanted chain lacks, the existing migrations as their Kind
// writes them, the checksum file and the record of result shapes. Problems
// are diagnostics in diags; with errors among them the set must not be
// written.
//
// A migration, once written, is never rewritten: it may have been applied.
// Each migration of a Kind records the State it leaves behind; a chain whose
// last State does not satisfy the wanted one gets the migrations its Kind
// evolves it through, or is refused. New migrations take the next versions
// of the folder, in the order of Kinds and then of chain names, so that a
// re-run picks the same ones. The checksum file records every migration, so
// that edits, deletions and two branches taking one version are caught.
//
// Plan returns the file names of each chain of the folder as the set leaves
// it, new migrations included, oldest first. The first one creates what the
// chain's handlers need: the generated wrappers name it.
func (d Dir) Plan(req Request, set *output.Set, diags *diag.List) map[ChainID][]string {
	p := planner{dir: d, req: req, set: set, diags: diags,
		reported: map[string]bool{}, content: map[string][]byte{}, chainOf: map[string]ChainID{}, kinds: map[string]Kind{}}
	for _, k := range req.Kinds {
		p.kinds[k.Name()] = k
	}
	p.plan()
	return p.chainFiles()
}

// chainFiles returns the file names of each chain, in version order (the
// names start with the version, in at least five digits).
func (p *planner) chainFiles() map[ChainID][]string {
	files := map[ChainID][]string{}
	for name, id := range p.chainOf {
		files[id] = append(files[id], name)
	}
	for _, names := range files {
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(Version(a), Version(b)), cmp.Compare(a, b)) })
	}
	return files
}

// planner plans one folder.
type planner struct {
	dir   Dir
	req   Request
	set   *output.Set
	diags *diag.List
	kinds map[string]Kind

	last     int64              // highest version in the folder
	reported map[string]bool    // files already reported as edited
	content  map[string][]byte  // file name → content, new migrations included
	chainOf  map[string]ChainID // file name → chain, for the checksum file
}

// link is a migration of a chain.
type link struct {
	File
	state State // nil when its header is damaged: err says why
	err   error
}

func (p *planner) at(name string) diag.Pos {
	return diag.Pos{File: filepath.Join(p.dir.Path, name), Line: 1, Col: 1}
}

func (p *planner) plan() {
	byVersion := map[int64]string{}
	for _, file := range p.dir.Files {
		p.content[file.Name] = file.Content
		if file.Version == 0 {
			continue
		}
		if other, dup := byVersion[file.Version]; dup {
			p.diags.Errorf(p.at(file.Name), "migrations %s and %s share version %d, which goose refuses (two branches took one version?); renumber the one that was not applied yet",
				other, file.Name, file.Version)
		}
		byVersion[file.Version] = file.Name
		p.last = max(p.last, file.Version)
	}

	recorded := p.verifySum()
	chains := p.chains()
	wants := p.wants()
	for _, w := range wants {
		id := ChainID{w.Kind.Name(), w.Name}
		if w.Kind.Owned() && (p.switchedMode(w, chains) || p.ownedElsewhere(w, chains[id], recorded)) {
			continue
		}
		p.evolve(w, chains[id])
	}
	p.removedConsumers(chains, wants, recorded)
	p.results()
	p.writeSum(recorded, wants)
}

// verifySum checks the folder against its checksum file and returns the
// recorded entries by file name.
func (p *planner) verifySum() map[string]sumEntry {
	recorded := map[string]sumEntry{}
	if p.dir.Sum == nil {
		return recorded
	}
	sumPos := p.at(SumFile)
	entries, err := parseSum(p.dir.Sum)
	if err != nil {
		if !p.req.Rehash {
			p.diags.Errorf(sumPos, "%s is damaged: %v; check the folder's migrations, then run idemgen -rehash to record them as they are", SumFile, err)
		}
		return recorded
	}
	var lastRecorded int64
	for _, e := range entries {
		recorded[e.Name] = e
		if v := p.versionOf(e.Name); v > lastRecorded {
			lastRecorded = v
		}
	}
	if p.req.Rehash {
		return recorded
	}
	for _, e := range entries {
		content, ok := p.content[e.Name]
		switch {
		case !ok:
			p.diags.Errorf(sumPos, "migration %s, recorded in %s, was deleted; it may have been applied: restore it (if it never was, run idemgen -rehash)", e.Name, SumFile)
		case hashOf(content) != e.Hash:
			p.reported[e.Name] = true
			p.diags.Errorf(p.at(e.Name), "migration %s changed after it was recorded in %s; it may have been applied, so restore it and put the change in a new migration (if it never was applied anywhere, run idemgen -rehash)",
				e.Name, SumFile)
		}
	}
	for _, file := range p.dir.Files {
		if _, ok := recorded[file.Name]; ok || file.Version == 0 || file.Version > lastRecorded {
			continue
		}
		p.diags.Errorf(p.at(file.Name), "migration %s (version %d) is new but not newer than the recorded history (up to version %d): two branches took one version, or it was inserted below applied migrations; renumber it after %05d",
			file.Name, file.Version, lastRecorded, lastRecorded)
	}
	return recorded
}

// versionOf returns the version of the folder's file name, 0 when the folder
// has no such file.
func (p *planner) versionOf(name string) int64 {
	for _, file := range p.dir.Files {
		if file.Name == name {
			return file.Version
		}
	}
	return 0
}

// chains returns the migrations of each chain in version order, after
// checking that every one is exactly what its Kind writes. A chain with a
// damaged header is reported and left out.
func (p *planner) chains() map[ChainID][]link {
	chains := map[ChainID][]link{}
	for _, file := range p.dir.Files {
		for _, k := range p.req.Kinds {
			name, state, ok, err := k.Read(file.Content)
			if !ok {
				continue
			}
			id := ChainID{k.Name(), name}
			p.chainOf[file.Name] = id
			chains[id] = append(chains[id], link{File: file, state: state, err: err})
			break
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(chains), compareChains) {
		chain := chains[id]
		slices.SortFunc(chain, func(a, b link) int { return cmp.Compare(a.Version, b.Version) })
		var prev State
		for _, l := range chain {
			if l.err != nil {
				p.diags.Errorf(p.at(l.Name), "the idemgen header of %s is damaged (%s); restore the file", l.Name, l.err)
				delete(chains, id)
				break
			}
			_, want, err := p.kinds[id.Kind].Render(prev, l.state)
			why := "it was edited"
			if err == nil {
				p.set.Files[filepath.Join(p.dir.Path, l.Name)] = want
			} else if !p.kinds[id.Kind].Owned() {
				// A fixed chain's Render says which of its
				// migrations it knows.
				why = err.Error()
			}
			if err == nil && !bytes.Equal(want, l.Content) && sqlOf(want) == sqlOf(l.Content) {
				// Written by an idemgen whose comments were worded
				// otherwise: it is what idemgen wrote, and it stays as it is.
				want = l.Content
				p.set.Files[filepath.Join(p.dir.Path, l.Name)] = want
			}
			if !bytes.Equal(want, l.Content) && !p.reported[l.Name] {
				p.reported[l.Name] = true
				p.diags.Errorf(p.at(l.Name), "migration %s of %s is not what idemgen wrote (%s); it may have been applied: restore it, and let idemgen write the change as a new migration",
					l.Name, describe(id, p.kinds[id.Kind]), why)
			}
			prev = l.state
		}
	}
	return chains
}

// describe names a chain in messages: "consumer billing.charge" for an owned
// kind, "the outbox chain idem_outbox" for another.
func describe(id ChainID, k Kind) string {
	if k.Owned() {
		return "consumer " + id.Name
	}
	return "the " + id.Kind + " chain " + id.Name
}

func compareChains(a, b ChainID) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// wants returns the wanted chains in the order their new migrations take
// versions: by Kind as Request.Kinds lists them, then by name.
func (p *planner) wants() []Want {
	order := map[string]int{}
	for i, k := range p.req.Kinds {
		order[k.Name()] = i
	}
	wants := slices.Clone(p.req.Wants)
	slices.SortStableFunc(wants, func(a, b Want) int {
		return cmp.Or(cmp.Compare(order[a.Kind.Name()], order[b.Kind.Name()]), cmp.Compare(a.Name, b.Name))
	})
	return wants
}

// evolve gives the wanted chain the migrations it lacks, if any.
func (p *planner) evolve(w Want, chain []link) {
	var current State
	if len(chain) > 0 {
		current = chain[len(chain)-1].state
	}
	steps, err := w.Kind.Evolve(current, w.State)
	if err != nil {
		what := "its " + w.Kind.Name()
		if k, ok := w.Kind.(interface{ What() string }); ok {
			what = "its " + k.What()
		}
		if !w.Kind.Owned() {
			what = "its tables"
		}
		if len(chain) > 0 {
			what += " (migration " + chain[len(chain)-1].Name + ")"
		}
		p.diags.Errorf(w.Pos, "%s cannot keep %s: %v", describe(ChainID{w.Kind.Name(), w.Name}, w.Kind), what, err)
		return
	}
	prev := current
	for _, next := range steps {
		name, content, err := w.Kind.Render(prev, next)
		if err != nil {
			// Evolve planned a step that Render cannot make: a bug in
			// the Kind, not in the user's input.
			panic("idemgen: " + w.Kind.Name() + " " + w.Name + ": " + err.Error())
		}
		p.last++
		file := FileName(p.last, name)
		p.set.Files[filepath.Join(p.dir.Path, file)] = content
		p.content[file] = content
		p.chainOf[file] = ChainID{w.Kind.Name(), w.Name}
		prev = next
	}
}

// ownedElsewhere refuses w when the folder records its consumer for another
// package that this run did not load and that has not retired it: two
// packages that share a migrations folder, each generated on its own, would
// otherwise both use the one inbox (and take its ownership in turns).
func (p *planner) ownedElsewhere(w Want, chain []link, recorded map[string]sumEntry) bool {
	if len(chain) == 0 {
		return false
	}
	e, ok := recorded[chain[0].Name]
	if !ok || e.Package == w.Owner || e.Package == "unknown" || e.Retired {
		return false
	}
	if slices.Contains(p.req.Packages, e.Package) {
		// Loaded in this run: it declares the consumer too (an error of
		// its own) or gave it up, and w takes it over.
		return false
	}
	p.diags.Errorf(w.Pos, "consumer %s belongs to package %s, whose inbox migration %s this migrations folder records (%s); a consumer name is one inbox, so two packages cannot share it. "+
		"Give this handler another consumer name; or, to move the consumer here, retire it in %s with \"//idem:retired consumer=%s\" and run idemgen there first",
		w.Name, e.Package, chain[0].Name, SumFile, e.Package, w.Name)
	return true
}

// switchedMode refuses w when the folder holds a chain of its consumer of
// another ModeKind: the handler switched between mode=tx and mode=external,
// and the rows recorded so far mean something else in the other mode (a
// committed change; a claim of a call to a provider).
func (p *planner) switchedMode(w Want, chains map[ChainID][]link) bool {
	mine, ok := w.Kind.(ModeKind)
	if !ok {
		return false
	}
	for _, k := range p.req.Kinds {
		other, ok := k.(ModeKind)
		chain := chains[ChainID{k.Name(), w.Name}]
		if !ok || k.Name() == w.Kind.Name() || len(chain) == 0 {
			continue
		}
		pos := w.ModePos
		if pos == (diag.Pos{}) {
			pos = w.Pos
		}
		p.diags.Errorf(pos, "consumer %s was mode=%s (chain %s/%s, migration %s); switching to mode=%s needs a new consumer name: "+
			"the rows of its table mean something else in mode=%s. Give the handler another consumer= (and table=, if it names one), "+
			"and retire the old name with \"//idem:retired consumer=%s\" (its table stays until you drop it)",
			w.Name, other.Mode(), k.Name(), w.Name, chain[len(chain)-1].Name, mine.Mode(), mine.Mode(), w.Name)
		return true
	}
	return false
}

// removedConsumers refuses to go on when a consumer that a loaded package
// owns has lost its handler without being retired: its inbox would be
// forgotten while it may still answer redeliveries.
func (p *planner) removedConsumers(chains map[ChainID][]link, wants []Want, recorded map[string]sumEntry) {
	declared := map[ChainID]bool{}
	switched := map[string]bool{} // consumers of a ModeKind, whose other chains switchedMode reports
	for _, w := range wants {
		declared[ChainID{w.Kind.Name(), w.Name}] = true
		if _, ok := w.Kind.(ModeKind); ok {
			switched[w.Name] = true
		}
	}
	retired := map[string]bool{}
	for _, r := range p.req.Retired {
		retired[r.Consumer] = true
	}
	for _, id := range slices.SortedFunc(maps.Keys(chains), compareChains) {
		chain := chains[id]
		owner := recorded[chain[0].Name].Package
		_, moded := p.kinds[id.Kind].(ModeKind)
		if !p.kinds[id.Kind].Owned() || declared[id] || retired[id.Name] || (moded && switched[id.Name]) || !slices.Contains(p.req.Packages, owner) {
			continue
		}
		p.diags.Errorf(p.at(chain[0].Name), "consumer %s of package %s has no handler any more; its inbox may still answer redeliveries, and its migrations stay. "+
			"Restore the handler, or retire the consumer on purpose with a line \"//idem:retired consumer=%s\" in package %s (the table stays until you drop it with a migration of your own)",
			id.Name, owner, id.Name, owner)
	}
}

// writeSum records every migration of the folder, new ones included.
func (p *planner) writeSum(recorded map[string]sumEntry, wants []Want) {
	owner := map[ChainID]string{}
	for _, w := range wants {
		owner[ChainID{w.Kind.Name(), w.Name}] = w.Owner
	}
	retiredBy := map[string]string{}
	for _, r := range p.req.Retired {
		retiredBy[r.Consumer] = r.Package
	}
	var entries []sumEntry
	for _, name := range slices.Sorted(maps.Keys(p.content)) {
		e := sumEntry{Name: name, Hash: hashOf(p.content[name])}
		if r, ok := recorded[name]; ok && p.reported[name] {
			// An edited migration is refused, not recorded anew.
			e.Hash = r.Hash
		}
		id, inChain := p.chainOf[name]
		switch {
		case !inChain:
		case p.kinds[id.Kind].Owned():
			e.Consumer = id.Name
			e.Package = cmp.Or(owner[id], recorded[name].Package, "unknown")
			// Retired by its owner, it may be taken over; declared
			// again, it is owned again.
			e.Retired = owner[id] == "" && (recorded[name].Retired || retiredBy[id.Name] == e.Package)
		default:
			e.Chain = id
		}
		entries = append(entries, e)
	}
	p.set.Files[filepath.Join(p.dir.Path, SumFile)] = formatSum(entries)
}
