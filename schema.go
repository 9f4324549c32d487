package reconcile

import _ "embed"

// ReferenceSchema is the SQL of the reference obligations table (docs/design.md, "Obligations")
// (configs/obligations.sql), for tests, the demo and teams starting fresh.
//
//go:embed configs/obligations.sql
var ReferenceSchema string
