package generate

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// The checksum file of a migrations folder, like Atlas's atlas.sum: a hash of
// every migration, and a first line that hashes all the others. Two branches
// that each add a migration both change that line, so their merge conflicts
// instead of silently taking one version twice; an edited migration no
// longer matches its hash.
//
//	h1:<hash of the lines below>
//	00001_accounts.sql h1:<hash>
//	00003_idem_billing_charge.sql h1:<hash> consumer=billing.charge package=example.com/billing
//
// The consumer and package of an inbox migration record which package owns
// the consumer, so that a handler removed from it is noticed, and a handler
// of another package that takes the same consumer name is refused. A
// trailing "retired" records that the owner retired the consumer
// (//idem:retired), so that another package may take it over.

type sumEntry struct {
	name, hash        string
	consumer, pkgPath string
	retired           bool
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
}

func formatSum(entries []sumEntry) []byte {
	var body strings.Builder
	for _, e := range entries {
		body.WriteString(e.name + " " + e.hash)
		if e.consumer != "" {
			body.WriteString(" consumer=" + e.consumer + " package=" + e.pkgPath)
			if e.retired {
				body.WriteString(" retired")
			}
		}
		body.WriteByte('\n')
	}
	return []byte(hashOf([]byte(body.String())) + "\n" + body.String())
}

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
		e := sumEntry{name: fields[0], hash: fields[1]}
		for _, f := range fields[2:] {
			k, v, hasValue := strings.Cut(f, "=")
			switch k {
			case "retired":
				if hasValue {
					return nil, fmt.Errorf("line %d has a malformed field %q", i+2, f)
				}
				e.retired = true
			case "consumer":
				e.consumer = v
			case "package":
				e.pkgPath = v
			default:
				return nil, fmt.Errorf("line %d has an unknown field %q", i+2, f)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}
