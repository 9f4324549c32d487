package reconcile

import _ "embed"

// ReferenceSchema is the SQL of DESIGN.md §1's obligations table
// (configs/obligations.sql), for tests, the demo and teams starting fresh.
//
//go:embed configs/obligations.sql
var ReferenceSchema string
