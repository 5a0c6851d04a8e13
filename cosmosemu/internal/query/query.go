// Package query parses and evaluates the Azure Cosmos DB for NoSQL query
// dialect for the cosmosemu emulator.
//
// A query is parsed and compiled once by Parse into an immutable *Query that
// may be executed any number of times, concurrently, over the documents of a
// partition with Execute, or tested against a single document with Filter.
//
// Values are JSON values as decoded by encoding/json into any:
// map[string]any, []any, string, float64, bool and nil (json.Number and Go
// integer types are accepted as numbers as well). Evaluation follows the
// service's semantics: a missing property is undefined, comparisons between
// different types are undefined rather than false, WHERE keeps only rows for
// which the filter is exactly true, projections omit undefined properties and
// SELECT VALUE drops undefined results.
package query

import (
	"slices"
)

// Features lists what a query uses that the Cosmos DB gateway cannot serve
// across partitions without a client-side query plan. A query for which
// CrossPartitionSafe is true can be run per partition with Execute and the
// results concatenated; the exception is a query without a FROM clause
// ("SELECT VALUE 1"), which yields its result once however many documents
// there are and so must be executed once, not once per partition.
type Features struct {
	OrderBy     bool // ORDER BY
	Top         bool // TOP n
	Distinct    bool // SELECT DISTINCT
	Aggregate   bool // COUNT, SUM, MIN, MAX or AVG
	OffsetLimit bool // OFFSET n LIMIT m
	GroupBy     bool // GROUP BY
}

// CrossPartitionSafe reports whether none of the features is used.
func (f Features) CrossPartitionSafe() bool {
	return !f.OrderBy && !f.Top && !f.Distinct && !f.Aggregate && !f.OffsetLimit && !f.GroupBy
}

// Query is a parsed and compiled query. It is immutable and safe for
// concurrent use by multiple goroutines.
type Query struct {
	features   Features
	sources    []compiledSource
	nvars      int
	where      evaluator
	star       bool
	value      evaluator
	items      []compiledItem
	distinct   bool
	top        *countSpec
	offset     *countSpec
	limit      *countSpec
	orderBy    []compiledOrder
	groupBy    []evaluator
	aggs       []aggSpec
	aggregate  bool
	paramNames []string
	stmt       *selectStmt // for Plan
	whereAST   *node       // for PartitionKeyFilter
	rootAlias  string      // alias bound to the whole document, "" if none

	filterPaths [][]string // document paths the WHERE clause reads
	orderKeys   []OrderKey // ORDER BY keys as document paths
}

// Parse parses and compiles a query text. On failure it returns an *Error:
// Code "SC1001" with a message like "Syntax error, incorrect syntax near
// 'x'." for syntax errors, "SC2001" for identifiers that are not FROM aliases,
// "SC2005" for unknown functions, "SC2050" for wrong argument counts,
// CodeInvalid for other semantic errors and CodeUnsupported for valid syntax
// that this package does not implement (subqueries, user-defined functions,
// ORDER BY RANK, ORDER BY together with GROUP BY or aggregates).
func Parse(text string) (*Query, error) {
	st, err := parseText(text)
	if err != nil {
		return nil, err
	}
	return compile(st)
}

// Features reports the query features relevant to cross-partition execution.
func (q *Query) Features() Features { return q.features }

// Parameters returns the names (with the leading '@') of the parameters the
// query refers to, each once. Execute and Filter require a value for each of
// them.
func (q *Query) Parameters() []string { return slices.Clone(q.paramNames) }

// Execute runs the query over docs, the documents of one partition in storage
// order, with params keyed by parameter name including the '@' (for example
// "@id"). It returns the result values in result order: whole documents for
// SELECT *, map[string]any for select lists, any JSON value for SELECT VALUE.
// Results may share maps and slices with docs; callers must not modify either.
//
// Without ORDER BY, results follow storage order. ORDER BY sorts stably across
// types (undefined < null < false < true < numbers < strings < arrays <
// objects) and keeps documents lacking the sort property. A query without a
// FROM clause is evaluated once, independently of docs.
//
// Execute returns an *Error when a parameter is missing or a TOP, OFFSET or
// LIMIT parameter is not a non-negative integer.
func (q *Query) Execute(docs []map[string]any, params map[string]any) ([]any, error) {
	x, err := q.newExec(params)
	if err != nil {
		return nil, err
	}
	return x.run(docs), nil
}

// Filter evaluates only the FROM and WHERE clauses against one document: it
// reports whether the document (for FROM ... IN / JOIN queries: any of the
// rows produced from it) satisfies the WHERE clause, i.e. evaluates to exactly
// true. A query without WHERE matches every document that produces a row.
// Errors are as for Execute.
func (q *Query) Filter(doc map[string]any, params map[string]any) (bool, error) {
	x, err := q.newExec(params)
	if err != nil {
		return false, err
	}
	matched := false
	x.rows(doc, func() bool {
		if q.where == nil || isTrue(q.where.eval(&x.env)) {
			matched = true
			return false
		}
		return true
	})
	return matched, nil
}
