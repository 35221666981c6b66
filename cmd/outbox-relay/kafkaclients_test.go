package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestKafkaClientsGoThroughKafkaconn: no subcommand builds a kafka-go
// client by hand (they ignored --kafka-tls* and --kafka-sasl-*, so
// reconcile talked PLAINTEXT to SASL_SSL brokers); kafkaclients.go builds
// them from the configuration's kafkaconn.Security.
func TestKafkaClientsGoThroughKafkaconn(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := map[string]bool{"Client": true, "Transport": true, "Dialer": true, "Writer": true, "Conn": true}
	bannedCalls := map[string]bool{"NewReader": true, "NewWriter": true, "Dial": true, "DialContext": true, "DialLeader": true, "DialPartition": true}
	fset := token.NewFileSet()
	for _, f := range files {
		if f == "kafkaclients.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		kafkaName := ""
		for _, imp := range file.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "github.com/segmentio/kafka-go" {
				kafkaName = "kafka"
				if imp.Name != nil {
					kafkaName = imp.Name.Name
				}
			}
		}
		if kafkaName == "" {
			continue
		}
		isKafka := func(e ast.Expr, names map[string]bool) (string, bool) {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				return "", false
			}
			id, ok := sel.X.(*ast.Ident)
			return sel.Sel.Name, ok && id.Name == kafkaName && names[sel.Sel.Name]
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if name, ok := isKafka(n.Type, banned); ok {
					t.Errorf("%s: builds a kafka.%s by hand; use config.kafkaClient/kafkaReader (kafkaclients.go)", fset.Position(n.Pos()), name)
				}
			case *ast.CallExpr:
				if name, ok := isKafka(n.Fun, bannedCalls); ok {
					t.Errorf("%s: calls kafka.%s; use config.kafkaClient/kafkaReader (kafkaclients.go)", fset.Position(n.Pos()), name)
				}
			}
			return true
		})
	}
}
