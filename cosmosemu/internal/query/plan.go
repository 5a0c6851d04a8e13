package query

import (
	"encoding/json"
	"strconv"
	"strings"
)

// OrderByFilterPlaceholder is the text the gateway puts in the WHERE clause of
// an ORDER BY query's rewritten form; clients replace it with "true" (or a
// resumption filter) before sending the query to each partition key range.
const OrderByFilterPlaceholder = "{documentdb-formattableorderbyquery-filter}"

// Query features, named as in the x-ms-cosmos-supported-query-features header
// and in the gateway's refusal of a plan the client cannot run.
const (
	FeatureAggregate          = "Aggregate"
	FeatureCompositeAggregate = "CompositeAggregate"
	FeatureDistinct           = "Distinct"
	FeatureGroupBy            = "GroupBy"
	FeatureMultipleAggregates = "MultipleAggregates"
	FeatureMultipleOrderBy    = "MultipleOrderBy"
	FeatureOffsetAndLimit     = "OffsetAndLimit"
	FeatureOrderBy            = "OrderBy"
	FeatureTop                = "Top"
	FeatureNonValueAggregate  = "NonValueAggregate"
)

// Plan is the client-side execution plan of a query, as the gateway's query
// plan (the queryInfo of a PartitionedQueryExecutionInfo) describes it. JSON
// encoding gives the service's field names; absent TOP/OFFSET/LIMIT are
// null, absent lists empty.
type Plan struct {
	// DistinctType is "None", "Unordered" or "Ordered" (DISTINCT with ORDER BY).
	DistinctType string `json:"distinctType"`
	// Top, Offset and Limit are the bound values of TOP, OFFSET and LIMIT.
	Top    *int `json:"top"`
	Offset *int `json:"offset"`
	Limit  *int `json:"limit"`
	// OrderBy holds "Ascending" or "Descending" per ORDER BY key and
	// OrderByExpressions the keys' text.
	OrderBy            []string `json:"orderBy"`
	OrderByExpressions []string `json:"orderByExpressions"`
	// GroupByExpressions are the GROUP BY keys' text; GroupByAliases the
	// result property names of a grouped (or non-VALUE aggregate) select
	// list, and GroupByAliasToAggregateType each one's aggregate ("Count",
	// "Sum", "Min", "Max", "Average") or null.
	GroupByExpressions          []string           `json:"groupByExpressions"`
	GroupByAliases              []string           `json:"groupByAliases"`
	GroupByAliasToAggregateType map[string]*string `json:"groupByAliasToAggregateType"`
	// Aggregates lists the aggregate of a SELECT VALUE aggregate query.
	Aggregates []string `json:"aggregates"`
	// RewrittenQuery is the query to send to each range instead of the
	// original one ("" to send the original): ORDER BY queries select _rid,
	// orderByItems and payload with OrderByFilterPlaceholder in the WHERE
	// clause; aggregates return {"item": ...} partial results; GROUP BY
	// queries select groupByItems and payload; OFFSET n LIMIT m becomes
	// OFFSET 0 LIMIT n+m.
	RewrittenQuery string `json:"rewrittenQuery"`
	// HasSelectValue reports SELECT VALUE.
	HasSelectValue bool `json:"hasSelectValue"`
	// DCountInfo is always null (DCOUNT is not modelled).
	DCountInfo json.RawMessage `json:"dCountInfo"`
	// HasNonStreamingOrderBy is always false (no vector or full-text ORDER BY).
	HasNonStreamingOrderBy bool `json:"hasNonStreamingOrderBy"`
	// Features are the features the client must support to run the plan.
	Features []string `json:"-"`
}

// Plan describes how a client runs q across partition key ranges, with params
// bound (TOP, OFFSET and LIMIT parameters appear as numbers in the plan, the
// rewritten query keeps the other parameters). It returns an *Error with
// CodeUnsupported for shapes whose partial results this package could not
// produce (an aggregate inside a larger select expression, a FROM clause not
// rooted at the container) and the errors of Execute for bad parameters.
func (q *Query) Plan(params map[string]any) (*Plan, error) {
	st := q.stmt
	x, err := q.newExec(params)
	if err != nil {
		return nil, err
	}
	p := &Plan{
		DistinctType: "None", OrderBy: []string{}, OrderByExpressions: []string{},
		GroupByExpressions: []string{}, GroupByAliases: []string{},
		GroupByAliasToAggregateType: map[string]*string{}, Aggregates: []string{},
		HasSelectValue: st.value != nil, DCountInfo: json.RawMessage("null"),
	}
	bind := func(clause string, c *countSpec) (*int, error) {
		if c == nil {
			return nil, nil
		}
		n, err := x.count(clause, c)
		if err != nil {
			return nil, err
		}
		return &n, nil
	}
	if p.Top, err = bind("TOP", st.top); err != nil {
		return nil, err
	}
	if p.Offset, err = bind("OFFSET", st.offset); err != nil {
		return nil, err
	}
	if p.Limit, err = bind("LIMIT", st.limit); err != nil {
		return nil, err
	}
	feature := func(f string) {
		for _, g := range p.Features {
			if g == f {
				return
			}
		}
		p.Features = append(p.Features, f)
	}
	if st.top != nil {
		feature(FeatureTop)
	}
	if st.offset != nil {
		feature(FeatureOffsetAndLimit)
	}
	if st.distinct {
		feature(FeatureDistinct)
		p.DistinctType = "Unordered"
		if len(st.orderBy) > 0 {
			p.DistinctType = "Ordered"
		}
	}
	for _, o := range st.orderBy {
		dir := "Ascending"
		if o.desc {
			dir = "Descending"
		}
		p.OrderBy = append(p.OrderBy, dir)
		p.OrderByExpressions = append(p.OrderByExpressions, sqlText(o.expr))
	}
	switch {
	case len(st.orderBy) > 1:
		feature(FeatureMultipleOrderBy)
	case len(st.orderBy) == 1:
		feature(FeatureOrderBy)
	}
	for _, g := range st.groupBy {
		p.GroupByExpressions = append(p.GroupByExpressions, sqlText(g))
	}
	if len(st.groupBy) > 0 {
		feature(FeatureGroupBy)
	}

	from, err := fromText(st.from)
	if err != nil {
		return nil, err
	}
	where := ""
	if st.where != nil {
		where = sqlText(st.where)
	}
	tail := func(b *strings.Builder) {
		b.WriteString(from)
		if where != "" {
			b.WriteString(" WHERE ")
			b.WriteString(where)
		}
	}

	aggregated := q.aggregate
	var b strings.Builder
	switch {
	case aggregated && st.value != nil:
		payload := sqlText(st.value)
		if k, ok := aggregateOf(st.value); ok {
			feature(FeatureAggregate)
			p.Aggregates = append(p.Aggregates, k)
			payload = "[" + partialAggregate(st.value) + "]"
		} else if containsAggregate(st.value) {
			return nil, unsupported("An aggregate inside a larger SELECT VALUE expression is not supported across partitions by this emulator.")
		}
		b.WriteString("SELECT ")
		if len(st.groupBy) > 0 {
			writeGroupByItems(&b, st.groupBy)
			b.WriteString(", ")
			b.WriteString(payload)
			b.WriteString(" AS payload")
		} else {
			b.WriteString("VALUE ")
			b.WriteString(payload)
		}
		tail(&b)
		writeGroupBy(&b, st.groupBy)
	case aggregated:
		var parts []string
		aggs := 0
		unnamed := 0
		for _, it := range st.items {
			name := it.name(&unnamed)
			text := sqlText(it.expr)
			var kind *string
			if k, ok := aggregateOf(it.expr); ok {
				aggs++
				kind = &k
				text = partialAggregate(it.expr)
			} else if containsAggregate(it.expr) {
				return nil, unsupported("An aggregate inside a larger select expression is not supported across partitions by this emulator.")
			}
			p.GroupByAliases = append(p.GroupByAliases, name)
			p.GroupByAliasToAggregateType[name] = kind
			parts = append(parts, jsonString(name)+": "+text)
		}
		if aggs > 0 {
			feature(FeatureAggregate)
			feature(FeatureNonValueAggregate)
		}
		if aggs > 1 {
			feature(FeatureMultipleAggregates)
		}
		b.WriteString("SELECT ")
		if len(st.groupBy) > 0 {
			writeGroupByItems(&b, st.groupBy)
			b.WriteString(", ")
		}
		b.WriteString("{" + strings.Join(parts, ", ") + "} AS payload")
		tail(&b)
		writeGroupBy(&b, st.groupBy)
	case len(st.orderBy) > 0:
		root := ""
		if len(st.from) > 0 && !st.from[0].iterate && len(st.from[0].path) == 0 {
			root = st.from[0].alias
		}
		if root == "" {
			return nil, unsupported("ORDER BY across partitions needs a FROM clause rooted at the container in this emulator.")
		}
		b.WriteString("SELECT ")
		if p.Top != nil {
			b.WriteString("TOP " + strconv.Itoa(*p.Top) + " ")
		}
		b.WriteString(root + "._rid, [")
		for i, o := range st.orderBy {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`{"item": ` + sqlText(o.expr) + "}")
		}
		b.WriteString("] AS orderByItems, ")
		b.WriteString(selectPayload(st, root))
		b.WriteString(" AS payload")
		cond := "(" + OrderByFilterPlaceholder + ")"
		if where != "" {
			cond = "(" + where + " AND " + cond + ")"
		}
		if st.value != nil {
			cond = "(" + cond + " AND IS_DEFINED(" + sqlText(st.value) + "))"
		}
		b.WriteString(from + " WHERE " + cond + " ORDER BY ")
		for i, o := range st.orderBy {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sqlText(o.expr))
			if o.desc {
				b.WriteString(" DESC")
			}
		}
		if p.Offset != nil && p.Limit != nil {
			b.WriteString(" OFFSET 0 LIMIT " + strconv.Itoa(*p.Offset+*p.Limit))
		}
	case p.Offset != nil && p.Limit != nil && !st.distinct:
		b.WriteString("SELECT ")
		b.WriteString(selectList(st))
		tail(&b)
		b.WriteString(" OFFSET 0 LIMIT " + strconv.Itoa(*p.Offset+*p.Limit))
	}
	p.RewrittenQuery = b.String()
	if p.RewrittenQuery != "" {
		// Every rewrite must be a query this package runs.
		if _, err := Parse(strings.ReplaceAll(p.RewrittenQuery, OrderByFilterPlaceholder, "true")); err != nil {
			return nil, unsupported("The query cannot be planned across partitions by this emulator: %s", err.Error())
		}
	}
	return p, nil
}

// aggregateOf reports whether n is a bare aggregate call and its kind as the
// plan names it.
func aggregateOf(n *node) (string, bool) {
	if n.kind != nCall {
		return "", false
	}
	switch strings.ToUpper(n.name) {
	case "COUNT":
		return "Count", true
	case "SUM":
		return "Sum", true
	case "MIN":
		return "Min", true
	case "MAX":
		return "Max", true
	case "AVG":
		return "Average", true
	}
	return "", false
}

// partialAggregate is the per-range partial result of an aggregate call, as
// the gateway rewrites it: {"item": COUNT(x)}, AVG as a sum and a count, MIN
// and MAX with a count telling an empty range from an undefined result.
func partialAggregate(n *node) string {
	arg := ""
	if len(n.kids) == 1 {
		arg = sqlText(n.kids[0])
	}
	switch strings.ToUpper(n.name) {
	case "AVG":
		return `{"item": {"sum": SUM(` + arg + `), "count": COUNT(` + arg + `)}}`
	case "MIN", "MAX":
		low := strings.ToLower(n.name)
		return `{"item": ` + sqlText(n) + `, "item2": {"` + low + `": ` + sqlText(n) + `, "count": COUNT(` + arg + `)}}`
	}
	return `{"item": ` + sqlText(n) + `}`
}

func writeGroupByItems(b *strings.Builder, keys []*node) {
	b.WriteString("[")
	for i, g := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"item": ` + sqlText(g) + "}")
	}
	b.WriteString("] AS groupByItems")
}

func writeGroupBy(b *strings.Builder, keys []*node) {
	if len(keys) == 0 {
		return
	}
	b.WriteString(" GROUP BY ")
	for i, g := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sqlText(g))
	}
}

// selectPayload is the payload of an ORDER BY rewrite: the root document
// for SELECT *, the value of SELECT VALUE, an object of the select list.
func selectPayload(st *selectStmt, root string) string {
	switch {
	case st.star:
		return root
	case st.value != nil:
		return sqlText(st.value)
	}
	parts := make([]string, 0, len(st.items))
	unnamed := 0
	for _, it := range st.items {
		name := it.name(&unnamed)
		parts = append(parts, jsonString(name)+": "+sqlText(it.expr))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// selectList prints the SELECT clause (after SELECT) of st, without TOP.
func selectList(st *selectStmt) string {
	var b strings.Builder
	if st.distinct {
		b.WriteString("DISTINCT ")
	}
	switch {
	case st.star:
		b.WriteString("*")
	case st.value != nil:
		b.WriteString("VALUE " + sqlText(st.value))
	default:
		for i, it := range st.items {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sqlText(it.expr))
			if it.alias != "" {
				b.WriteString(" AS " + it.alias)
			}
		}
	}
	return b.String()
}

// fromText prints a FROM clause (with its leading space), "" when absent.
func fromText(from []fromSource) (string, error) {
	if len(from) == 0 {
		return "", unsupported("A query without a FROM clause cannot be planned across partitions by this emulator.")
	}
	var b strings.Builder
	for i, src := range from {
		if i == 0 {
			b.WriteString(" FROM ")
		} else {
			b.WriteString(" JOIN ")
		}
		path := src.input + segsText(src.path)
		switch {
		case src.iterate:
			b.WriteString(src.alias + " IN " + path)
		case src.alias != "" && src.alias != path:
			b.WriteString(path + " AS " + src.alias)
		default:
			b.WriteString(path)
		}
	}
	return b.String(), nil
}

func segsText(segs []pathSeg) string {
	var b strings.Builder
	for _, s := range segs {
		switch {
		case s.isIndex:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case isIdentifier(s.name):
			b.WriteString("." + s.name)
		default:
			b.WriteString("[" + jsonString(s.name) + "]")
		}
	}
	return b.String()
}

func isIdentifier(s string) bool {
	if s == "" || isKeyword(strings.ToUpper(s)) {
		return false
	}
	for i, r := range s {
		if r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}

func jsonString(s string) string {
	var b strings.Builder
	writeJSONString(&b, s)
	return b.String()
}

// sqlText prints an expression in the gateway's style: operators
// parenthesized, string literals double-quoted, properties dotted.
func sqlText(n *node) string {
	var b strings.Builder
	writeSQL(&b, n)
	return b.String()
}

func writeSQL(b *strings.Builder, n *node) {
	list := func(kids []*node) {
		for i, k := range kids {
			if i > 0 {
				b.WriteString(", ")
			}
			writeSQL(b, k)
		}
	}
	switch n.kind {
	case nLit:
		switch v := n.val.(type) {
		case UndefinedType:
			b.WriteString("undefined")
		case string:
			writeJSONString(b, v)
		default:
			raw, err := json.Marshal(v)
			if err != nil {
				b.WriteString("null")
				return
			}
			b.Write(raw)
		}
	case nParam, nIdent:
		b.WriteString(n.name)
	case nProp:
		writeSQL(b, n.kids[0])
		if isIdentifier(n.name) {
			b.WriteString("." + n.name)
		} else {
			b.WriteString("[" + jsonString(n.name) + "]")
		}
	case nIndex:
		writeSQL(b, n.kids[0])
		b.WriteString("[")
		writeSQL(b, n.kids[1])
		b.WriteString("]")
	case nUnary:
		b.WriteString("(" + n.op)
		if n.op == "NOT" {
			b.WriteString(" ")
		}
		writeSQL(b, n.kids[0])
		b.WriteString(")")
	case nBinary, nAnd, nOr, nCoalesce:
		op := n.op
		switch n.kind {
		case nAnd:
			op = "AND"
		case nOr:
			op = "OR"
		case nCoalesce:
			op = "??"
		}
		b.WriteString("(")
		writeSQL(b, n.kids[0])
		b.WriteString(" " + op + " ")
		writeSQL(b, n.kids[1])
		b.WriteString(")")
	case nIn:
		b.WriteString("(")
		writeSQL(b, n.kids[0])
		if n.not {
			b.WriteString(" NOT")
		}
		b.WriteString(" IN (")
		list(n.kids[1:])
		b.WriteString("))")
	case nBetween:
		b.WriteString("(")
		writeSQL(b, n.kids[0])
		if n.not {
			b.WriteString(" NOT")
		}
		b.WriteString(" BETWEEN ")
		writeSQL(b, n.kids[1])
		b.WriteString(" AND ")
		writeSQL(b, n.kids[2])
		b.WriteString(")")
	case nLike:
		b.WriteString("(")
		writeSQL(b, n.kids[0])
		if n.not {
			b.WriteString(" NOT")
		}
		b.WriteString(" LIKE ")
		writeSQL(b, n.kids[1])
		if len(n.kids) > 2 {
			b.WriteString(" ESCAPE ")
			writeSQL(b, n.kids[2])
		}
		b.WriteString(")")
	case nCond:
		b.WriteString("(")
		writeSQL(b, n.kids[0])
		b.WriteString(" ? ")
		writeSQL(b, n.kids[1])
		b.WriteString(" : ")
		writeSQL(b, n.kids[2])
		b.WriteString(")")
	case nCall:
		b.WriteString(n.name + "(")
		list(n.kids)
		b.WriteString(")")
	case nArray:
		b.WriteString("[")
		list(n.kids)
		b.WriteString("]")
	case nObject:
		b.WriteString("{")
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(jsonString(n.keys[i]) + ": ")
			writeSQL(b, k)
		}
		b.WriteString("}")
	}
}
