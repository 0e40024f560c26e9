package idem

// MaintenanceStatement returns a statement of m for the tests: "Purge" or
// "Sweep".
func MaintenanceStatement(m Maintenance, name string) string {
	switch name {
	case "Purge":
		return m.t.Purge
	case "Sweep":
		return m.t.Sweep
	}
	return ""
}
