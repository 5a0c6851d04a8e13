package query

import "fmt"

// Error codes carried by *Error. The SC codes are the ones the Cosmos DB
// service reports for the same condition; the others are used where the
// service's code is not known or the condition is specific to this package.
const (
	// CodeSyntax is a syntax error ("Syntax error, incorrect syntax near 'x'.").
	CodeSyntax = "SC1001"
	// CodeUnresolvedIdentifier is an identifier or parameter that names
	// nothing ("Identifier 'x' could not be resolved.").
	CodeUnresolvedIdentifier = "SC2001"
	// CodeUnknownFunction is a call of a function that does not exist
	// ("'x' is not a recognized built-in function name.").
	CodeUnknownFunction = "SC2005"
	// CodeArgumentCount is a built-in function called with the wrong number
	// of arguments ("The X function requires N argument(s).").
	CodeArgumentCount = "SC2050"
	// CodeInvalid is a semantically invalid query that parses (misplaced
	// aggregate, property outside GROUP BY, bad TOP/OFFSET/LIMIT value, ...).
	CodeInvalid = "BadRequest"
	// CodeUnsupported is valid Cosmos DB syntax that this package does not
	// implement (subqueries, user-defined functions, ORDER BY RANK, ...).
	CodeUnsupported = "Unsupported"
)

// Error is the error returned by Parse, Execute and Filter. Code is a service
// error code such as "SC1001" (see the Code* constants) and Message the
// human-readable text, worded like the service's where the service's wording
// is known. Callers turn it into an HTTP 400 response.
type Error struct {
	Code    string
	Message string
}

// Error implements the error interface as "Code: Message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

func newError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func syntaxErrorNear(text string) *Error {
	return &Error{Code: CodeSyntax, Message: fmt.Sprintf("Syntax error, incorrect syntax near '%s'.", text)}
}

func syntaxErrorEOF() *Error {
	return &Error{Code: CodeSyntax, Message: "Syntax error, unexpected end-of-file."}
}

func unsupported(format string, args ...any) *Error {
	return newError(CodeUnsupported, format, args...)
}
