// Package output is the in-memory result of a run: the files idemgen owns,
// with their wanted content, and those it no longer needs. Writing and
// checking share it: Write changes only files whose bytes differ, Diff shows
// what Write would change.
package output

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aymanbagabas/go-udiff"

	"github.com/idemgen/idemgen/internal/diag"
)

// Set is the output of one run.
type Set struct {
	// Files maps absolute paths to their wanted content.
	Files map[string][]byte
	// Orphans are absolute paths of idemgen files that nothing generates any
	// more.
	Orphans []string
}

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{Files: map[string][]byte{}} }

// Change is one difference between the Set and the disk.
type Change struct {
	Path string
	Kind ChangeKind
	Old  []byte // content on disk; nil when missing
	New  []byte // wanted content; nil for an orphan
}

// ChangeKind says how a file differs.
type ChangeKind int

const (
	Missing ChangeKind = iota // generated, not on disk
	Stale                     // on disk with other content
	Orphan                    // on disk, no longer generated
)

func (k ChangeKind) String() string {
	return [...]string{"missing", "stale", "orphaned"}[k]
}

// Changes compares the Set with the disk, in path order.
func (s *Set) Changes() ([]Change, error) {
	var changes []Change
	for _, path := range slices.Sorted(maps.Keys(s.Files)) {
		want := s.Files[path]
		have, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			changes = append(changes, Change{Path: path, Kind: Missing, New: want})
		case err != nil:
			return nil, err
		case !bytes.Equal(have, want):
			changes = append(changes, Change{Path: path, Kind: Stale, Old: have, New: want})
		}
	}
	for _, path := range slices.Sorted(slices.Values(s.Orphans)) {
		have, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			changes = append(changes, Change{Path: path, Kind: Orphan, Old: have})
		}
	}
	return changes, nil
}

// Write brings the disk in line with the Set: it writes the missing and stale
// files (creating folders as needed), deletes the orphans, and touches
// nothing else. It returns what it changed.
func (s *Set) Write() ([]Change, error) {
	changes, err := s.Changes()
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		if c.Kind == Orphan {
			if err := os.Remove(c.Path); err != nil {
				return nil, err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
			return nil, err
		}
		if err := writeFile(c.Path, c.New); err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// writeFile replaces path atomically, so that an interrupted run never leaves
// half a file behind.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Diff renders changes as unified diffs with paths relative to dir.
func Diff(changes []Change, dir string) string {
	var b strings.Builder
	for _, c := range changes {
		name := filepath.ToSlash(diag.Rel(dir, c.Path))
		oldLabel, newLabel := "a/"+name, "b/"+name
		switch c.Kind {
		case Missing:
			oldLabel = "/dev/null"
		case Orphan:
			newLabel = "/dev/null"
		}
		b.WriteString("idemgen: " + c.Kind.String() + ": " + name + "\n")
		b.WriteString(udiff.Unified(oldLabel, newLabel, string(c.Old), string(c.New)))
	}
	return b.String()
}
