package migrate

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The checksum file of a migrations folder (SumFile), like Atlas's atlas.sum:
// a hash of every migration, and a first line that hashes all the others.
// Two branches that each add a migration both change that line, so their
// merge conflicts instead of silently taking one version twice; an edited
// migration no longer matches its hash.
//
//	h1:<hash of the lines below>
//	00001_accounts.sql h1:<hash>
//	00003_idem_billing_charge.sql h1:<hash> consumer=billing.charge package=example.com/billing
//
// The consumer and package of a migration of an owned kind (an inbox) record
// which package owns the consumer, so that a handler removed from it is
// noticed, and a handler of another package that takes the same consumer
// name is refused. A trailing "retired" records that the owner retired the
// consumer (//idem:retired), so that another package may take it over. A
// migration of a kind that is not owned records its chain as
// chain=<kind>/<name>.

// sumEntry is one line of a checksum file after its first.
type sumEntry struct {
	Name string // the migration's file name
	Hash string // hashOf its content
	// Consumer and Package: the chain and owner of a migration of an owned
	// kind; Package is "unknown" when no run has known it.
	Consumer, Package string
	// Retired: the owner retired the consumer.
	Retired bool
	// Chain is the chain of a migration of a kind that is not owned.
	Chain ChainID
}

// hashOf returns the checksum file's hash of data: "h1:" and its SHA-256 in
// standard base64.
func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
}

// formatSum renders a checksum file of entries, in the order given.
func formatSum(entries []sumEntry) []byte {
	var body strings.Builder
	for _, e := range entries {
		body.WriteString(e.Name + " " + e.Hash)
		switch {
		case e.Consumer != "":
			body.WriteString(" consumer=" + e.Consumer + " package=" + e.Package)
			if e.Retired {
				body.WriteString(" retired")
			}
		case e.Chain != ChainID{}:
			body.WriteString(" chain=" + e.Chain.Kind + "/" + e.Chain.Name)
		}
		body.WriteByte('\n')
	}
	return []byte(hashOf([]byte(body.String())) + "\n" + body.String())
}

// parseSum reads a checksum file written by formatSum. An error says what is
// damaged, and where.
func parseSum(data []byte) ([]sumEntry, error) {
	total, body, ok := strings.Cut(string(data), "\n")
	if !ok || !strings.HasPrefix(total, "h1:") {
		return nil, fmt.Errorf("its first line is not a h1: hash")
	}
	if hashOf([]byte(body)) != total {
		return nil, fmt.Errorf("its first line does not match the lines below it (two branches' versions merged?)")
	}
	var entries []sumEntry
	for i, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "h1:") {
			return nil, fmt.Errorf("line %d is not \"name h1:hash\"", i+2)
		}
		e := sumEntry{Name: fields[0], Hash: fields[1]}
		for _, f := range fields[2:] {
			k, v, hasValue := strings.Cut(f, "=")
			switch k {
			case "retired":
				if hasValue {
					return nil, fmt.Errorf("line %d has a malformed field %q", i+2, f)
				}
				e.Retired = true
			case "consumer":
				e.Consumer = v
			case "package":
				e.Package = v
			case "chain":
				kind, name, ok := strings.Cut(v, "/")
				if !ok || kind == "" || name == "" {
					return nil, fmt.Errorf("line %d has a malformed field %q", i+2, f)
				}
				e.Chain = ChainID{Kind: kind, Name: name}
			default:
				return nil, fmt.Errorf("line %d has an unknown field %q", i+2, f)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// Recorded is a consumer recorded in the checksum file of a migrations
// folder: the owner of an inbox (or claims table, or fingerprint column).
type Recorded struct {
	Consumer, Package string
	// Dir is the folder, absolute.
	Dir string
	// Retired: the owner retired the consumer.
	Retired bool
}

// FindRecorded returns the consumers recorded in every checksum file below
// root (a module's directory), in folder order: the folders where each
// consumer's migrations already are. It skips what the go command skips
// (testdata, vendor, directories starting with . or _) and nested modules.
func FindRecorded(root string) ([]Recorded, error) {
	var out []Recorded
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if d.Name() != SumFile {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		entries, err := parseSum(data)
		if err != nil {
			return nil // the folder's own run reports it
		}
		seen := map[string]int{}
		for _, e := range entries {
			if e.Consumer == "" {
				continue
			}
			if i, ok := seen[e.Consumer]; ok {
				out[i].Retired = out[i].Retired || e.Retired
				continue
			}
			seen[e.Consumer] = len(out)
			out = append(out, Recorded{Consumer: e.Consumer, Package: e.Package, Dir: filepath.Dir(path), Retired: e.Retired})
		}
		return nil
	})
	return out, err
}
