package idem

// MaintenanceStatement returns a statement of m for the tests: "Purge" or
// "Sweep".
func MaintenanceStatement(m Maintenance, name string) string {
	switch name {
	case "Purge":
		return m.purge
	case "Sweep":
		return m.sweep
	}
	return ""
}
