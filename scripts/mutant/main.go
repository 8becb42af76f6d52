// Command mutant writes one gremlins mutant of a Go file to stdout, for
// scripts/mutation.sh: the operator at LINE:COL replaced as gremlins'
// mutator KIND would (the tables of gremlins v0.6.0,
// internal/engine/mappings.go). gremlins runs only the mutants its coverage
// profile reaches; this builds the ones it reports NOT COVERED, so that the
// script can run them through `go test -overlay`.
//
//	go run ./scripts/mutant KIND FILE LINE COL
package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
)

// mutations is gremlins' replacement table per mutator kind.
var mutations = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE": {
		token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL,
		token.REM: token.MUL, token.SUB: token.ADD,
	},
	"CONDITIONALS_BOUNDARY": {
		token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ,
	},
	"CONDITIONALS_NEGATION": {
		token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ,
		token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL,
	},
	"INCREMENT_DECREMENT": {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_ASSIGNMENTS": {
		token.ADD_ASSIGN: token.SUB_ASSIGN, token.MUL_ASSIGN: token.QUO_ASSIGN,
		token.QUO_ASSIGN: token.MUL_ASSIGN, token.REM_ASSIGN: token.REM_ASSIGN,
		token.SUB_ASSIGN: token.ADD_ASSIGN,
	},
	"INVERT_BITWISE": {
		token.AND: token.OR, token.OR: token.AND, token.XOR: token.AND,
		token.AND_NOT: token.AND, token.SHL: token.SHR, token.SHR: token.SHL,
	},
	"INVERT_BWASSIGN": {
		token.AND_ASSIGN: token.OR_ASSIGN, token.OR_ASSIGN: token.AND_ASSIGN,
		token.XOR_ASSIGN: token.AND_ASSIGN, token.AND_NOT_ASSIGN: token.AND_ASSIGN,
		token.SHL_ASSIGN: token.SHR_ASSIGN, token.SHR_ASSIGN: token.SHL_ASSIGN,
	},
	"INVERT_LOGICAL":   {token.LAND: token.LOR, token.LOR: token.LAND},
	"INVERT_LOOPCTRL":  {token.BREAK: token.CONTINUE, token.CONTINUE: token.BREAK},
	"INVERT_NEGATIVES": {token.SUB: token.ADD},
	"REMOVE_SELF_ASSIGNMENTS": {
		token.ADD_ASSIGN: token.ASSIGN, token.AND_ASSIGN: token.ASSIGN,
		token.AND_NOT_ASSIGN: token.ASSIGN, token.MUL_ASSIGN: token.ASSIGN,
		token.OR_ASSIGN: token.ASSIGN, token.QUO_ASSIGN: token.ASSIGN,
		token.REM_ASSIGN: token.ASSIGN, token.SHL_ASSIGN: token.ASSIGN,
		token.SHR_ASSIGN: token.ASSIGN, token.SUB_ASSIGN: token.ASSIGN,
		token.XOR_ASSIGN: token.ASSIGN,
	},
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: mutant KIND FILE LINE COL")
		os.Exit(2)
	}
	line, errLine := strconv.Atoi(os.Args[3])
	col, errCol := strconv.Atoi(os.Args[4])
	if err := errors.Join(errLine, errCol); err != nil {
		fmt.Fprintln(os.Stderr, "mutant: position:", err)
		os.Exit(2)
	}
	src, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutant:", err)
		os.Exit(1)
	}
	out, err := mutate(src, os.Args[1], line, col)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mutant: %s:%d:%d: %v\n", os.Args[2], line, col, err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, "mutant:", err)
		os.Exit(1)
	}
}

// mutate returns src with the operator at line:col (1-based, columns in
// bytes, as go/token counts them) replaced by kind's counterpart. Only the
// operator's bytes change, so every other position stays where it was.
func mutate(src []byte, kind string, line, col int) ([]byte, error) {
	table, ok := mutations[kind]
	if !ok {
		return nil, fmt.Errorf("unknown mutator %q", kind)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	tf := fset.File(file.Pos())
	if line < 1 || line > tf.LineCount() {
		return nil, fmt.Errorf("no line %d", line)
	}
	off := tf.Offset(tf.LineStart(line)) + col - 1
	if col < 1 || off >= len(src) {
		return nil, fmt.Errorf("no column %d", col)
	}
	at := tf.Pos(off)
	found := token.ILLEGAL
	ast.Inspect(file, func(n ast.Node) bool {
		if tok, pos, ok := operator(n); ok && pos == at {
			if _, mutable := table[tok]; mutable {
				found = tok
			}
		}
		return found == token.ILLEGAL
	})
	if found == token.ILLEGAL {
		return nil, fmt.Errorf("no operator that %s mutates", kind)
	}
	to := table[found]
	if to == found {
		return nil, fmt.Errorf("%s leaves %s unchanged", kind, found)
	}
	out := make([]byte, 0, len(src)+2)
	out = append(out, src[:off]...)
	out = append(out, to.String()...)
	return append(out, src[off+len(found.String()):]...), nil
}

// operator is the token gremlins mutates in n and its position, for the
// node kinds gremlins looks at.
func operator(n ast.Node) (token.Token, token.Pos, bool) {
	switch n := n.(type) {
	case *ast.AssignStmt:
		return n.Tok, n.TokPos, true
	case *ast.BinaryExpr:
		return n.Op, n.OpPos, true
	case *ast.BranchStmt:
		return n.Tok, n.TokPos, true
	case *ast.IncDecStmt:
		return n.Tok, n.TokPos, true
	case *ast.UnaryExpr:
		return n.Op, n.OpPos, true
	}
	return token.ILLEGAL, token.NoPos, false
}
