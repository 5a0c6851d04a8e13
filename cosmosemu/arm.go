package cosmosemu

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// ARMPathPrefix is the reserved path prefix of the emulator's Azure
// Resource Manager surface: a client's ARM endpoint is the emulator's
// endpoint followed by it (Server.ARMEndpoint, e.g.
// "https://127.0.0.1:8081/_arm"), its audience an ARM one
// ("https://management.azure.com"), and below the prefix the paths are
// ARM's, for the one account the emulator is (Options.AccountName):
//
//	GET    /subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.DocumentDB/databaseAccounts/{a}
//	PUT    .../databaseAccounts/{a}/sqlDatabases/{db}
//	GET    .../databaseAccounts/{a}/sqlDatabases/{db}
//	DELETE .../databaseAccounts/{a}/sqlDatabases/{db}
//	PUT    .../databaseAccounts/{a}/sqlDatabases/{db}/containers/{c}
//	GET    .../databaseAccounts/{a}/sqlDatabases/{db}/containers/{c}
//	DELETE .../databaseAccounts/{a}/sqlDatabases/{db}/containers/{c}
//	GET    /subscriptions/{s}/providers/Microsoft.DocumentDB/locations/{l}/operationsStatus/{id}
//	GET    /subscriptions/{s}/providers/Microsoft.DocumentDB/locations/{l}/operationResults/{id}
//
// The contract, as ARM's and the Microsoft.DocumentDB REST specification's
// (ARMAPIVersion):
//
//   - Every request needs an api-version query parameter (any value; 400
//     MissingApiVersionParameter without one) and "Authorization: Bearer
//     <token>": a well-formed, unexpired JWT (signatures are not checked,
//     as on the data plane) whose aud is https://management.azure.com or
//     https://management.core.windows.net (with or without the trailing
//     slash), of AuthOptions.TenantID's tenant when that is set, naming an
//     oid. Otherwise 401 with code AuthenticationFailed (no or malformed
//     header), InvalidAuthenticationToken, ExpiredAuthenticationToken,
//     InvalidAuthenticationTokenAudience or
//     InvalidAuthenticationTokenTenant. A principal outside a non-empty
//     AuthOptions.ManagementPrincipals gets 403 AuthorizationFailed. The
//     surface is served whatever AuthOptions.DisableLocalAuth says: it is
//     how a token manages databases and containers, which the data plane
//     refuses to tokens.
//   - Path segment names are case-insensitive; any subscription and
//     resource group are accepted; an account name other than the
//     emulator's (case-insensitively) answers 404 ResourceNotFound, as
//     does an absent database or container, and a path the surface does
//     not serve answers 404 InvalidResourceType.
//   - PUT takes {"properties":{"resource":{...},"options":{...}}}
//     (SqlDatabaseCreateUpdateParameters, SqlContainerCreateUpdateParameters):
//     resource is the data-plane resource body (id, which must equal the
//     path's name, and for a container partitionKey, indexingPolicy,
//     defaultTtl, ...), options {"throughput":N} or
//     {"autoscaleSettings":{"maxThroughput":N}} for dedicated throughput.
//     It creates through the very paths the data plane's creates take (the
//     same validation, 400 BadRequest with the data plane's message, and the
//     same offers), or, for an existing resource, replaces a container's
//     properties as the data plane's replace does (a database has none;
//     options are validated and otherwise ignored on update). It answers
//     200 with the final resource, synchronously: a 200 without polling
//     headers is a completed long-running operation to ARM clients
//     (azcore's poller). A container in an absent database answers 404.
//   - GET answers 200 with the resource: {"id": its ARM id, "name", "type":
//     "Microsoft.DocumentDB/databaseAccounts/sqlDatabases" or
//     ".../sqlDatabases/containers", "properties":{"resource":{id, _rid,
//     _ts, _etag, and a container's partitionKey, indexingPolicy,
//     defaultTtl, ...}, "options": its throughput when it has an offer}}.
//     The account is {"id","name","type":"Microsoft.DocumentDB/databaseAccounts",
//     "location","kind":"GlobalDocumentDB","properties":{"provisioningState":
//     "Succeeded","documentEndpoint","consistencyPolicy","capabilities"
//     (EnableServerless for Options.Serverless),"locations","disableLocalAuth"}}.
//   - DELETE removes the resource at once, as the data plane's delete does,
//     and answers 202 with Azure-AsyncOperation (operationsStatus, answering
//     {"status":"Succeeded"}) and Location (operationResults, answering
//     204) headers, the only answers besides 204 the specification allows
//     (and the generated armcosmos client accepts); 204 when the resource
//     does not exist.
//   - Errors answer {"error":{"code","message"}}; answers carry
//     x-ms-request-id and x-ms-correlation-request-id.
//
// ARM requests are not Cosmos DB requests: Options.Middleware (the knobs'
// latency, faults and charges) never sees them, and they carry none of the
// data plane's headers.
const ARMPathPrefix = "/_arm"

// ARMAPIVersion is the Microsoft.DocumentDB api-version whose shapes the
// ARM surface serves. Requests may give any api-version.
const ARMAPIVersion = "2025-04-15"

// armAudiences are the token audiences ARM accepts (compared without a
// trailing slash).
var armAudiences = []string{"https://management.azure.com", "https://management.core.windows.net"}

const (
	armTypeAccount   = "Microsoft.DocumentDB/databaseAccounts"
	armTypeDatabase  = armTypeAccount + "/sqlDatabases"
	armTypeContainer = armTypeDatabase + "/containers"
	maxARMBody       = 4 << 20
)

// isARMPath reports whether a request addresses the ARM surface.
func isARMPath(p string) bool {
	return p == ARMPathPrefix || strings.HasPrefix(p, ARMPathPrefix+"/")
}

// ARMEndpoint is the endpoint ARM clients use for this emulator (the
// account endpoint followed by ARMPathPrefix, without a trailing slash),
// e.g. as cloud.Configuration's ResourceManager endpoint.
func (s *Server) ARMEndpoint() string {
	return strings.TrimSuffix(s.endpoint, "/") + ARMPathPrefix
}

// armError is an ARM error answer.
type armError struct {
	status    int
	code, msg string
}

func armErr(status int, code, format string, args ...any) *armError {
	return &armError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// armFromAPI converts a refusal of the create and replace paths the ARM
// surface shares with the data plane.
func armFromAPI(e *apiError) *armError {
	code := e.code
	if e.status == http.StatusNotFound {
		code = "ResourceNotFound"
	}
	return &armError{status: e.status, code: code, msg: e.msg}
}

// armResult is a successful ARM answer.
type armResult struct {
	status int
	body   any // JSON-encoded when non-nil
	header http.Header
}

// armRef is a parsed ARM path.
type armRef struct {
	kind      armKind
	sub, rg   string
	account   string // as the path names it
	db, coll  string
	location  string // operations
	operation string // operation id
}

type armKind int

const (
	armAccount armKind = iota
	armDatabase
	armContainer
	armOpStatus
	armOpResult
)

// parseARMPath parses the path below ARMPathPrefix; false for a path the
// surface does not serve.
func parseARMPath(u *url.URL) (armRef, bool) {
	rest := strings.Trim(strings.TrimPrefix(u.EscapedPath(), ARMPathPrefix), "/")
	var segs []string
	for _, raw := range strings.Split(rest, "/") {
		seg, err := url.PathUnescape(raw)
		if err != nil || seg == "" {
			return armRef{}, false
		}
		segs = append(segs, seg)
	}
	is := func(i int, name string) bool { return i < len(segs) && strings.EqualFold(segs[i], name) }
	var ref armRef
	if len(segs) < 2 || !is(0, "subscriptions") {
		return ref, false
	}
	ref.sub = segs[1]
	if len(segs) == 8 && is(2, "providers") && is(3, "Microsoft.DocumentDB") && is(4, "locations") {
		ref.location, ref.operation = segs[5], segs[7]
		switch {
		case is(6, "operationsStatus"):
			ref.kind = armOpStatus
		case is(6, "operationResults"):
			ref.kind = armOpResult
		default:
			return ref, false
		}
		return ref, true
	}
	if len(segs) < 8 || !is(2, "resourceGroups") || !is(4, "providers") || !is(5, "Microsoft.DocumentDB") || !is(6, "databaseAccounts") {
		return ref, false
	}
	ref.rg, ref.account = segs[3], segs[7]
	switch {
	case len(segs) == 8:
		ref.kind = armAccount
	case len(segs) == 10 && is(8, "sqlDatabases"):
		ref.kind, ref.db = armDatabase, segs[9]
	case len(segs) == 12 && is(8, "sqlDatabases") && is(10, "containers"):
		ref.kind, ref.db, ref.coll = armContainer, segs[9], segs[11]
	default:
		return ref, false
	}
	return ref, true
}

// accountID is the ARM id of the account the path names (spelled as the
// request spells it, so that refusals name what was asked for).
func (ref armRef) accountID(account string) string {
	return "/subscriptions/" + ref.sub + "/resourceGroups/" + ref.rg + "/providers/Microsoft.DocumentDB/databaseAccounts/" + account
}

func (ref armRef) databaseID(account string) string {
	return ref.accountID(account) + "/sqlDatabases/" + ref.db
}

func (ref armRef) containerID(account string) string {
	return ref.databaseID(account) + "/containers/" + ref.coll
}

// scope is the ARM id of the addressed resource as the request names it.
func (ref armRef) scope() string {
	switch ref.kind {
	case armDatabase:
		return ref.databaseID(ref.account)
	case armContainer:
		return ref.containerID(ref.account)
	case armOpStatus, armOpResult:
		return "/subscriptions/" + ref.sub + "/providers/Microsoft.DocumentDB/locations/" + ref.location
	}
	return ref.accountID(ref.account)
}

// action is the ARM action a request performs on ref.
func (ref armRef) action(method string) string {
	verb := map[string]string{http.MethodGet: "read", http.MethodPut: "write", http.MethodDelete: "delete"}[method]
	switch ref.kind {
	case armDatabase:
		return armTypeDatabase + "/" + verb
	case armContainer:
		return armTypeContainer + "/" + verb
	case armOpStatus:
		return "Microsoft.DocumentDB/locations/operationsStatus/read"
	case armOpResult:
		return "Microsoft.DocumentDB/locations/operationResults/read"
	}
	return armTypeAccount + "/" + verb
}

// armOperation is an operation a DELETE answered 202 for; it completed
// before the answer.
type armOperation struct {
	id         string // ARM id of the operationsStatus resource
	start, end time.Time
}

// serveARM serves a request under ARMPathPrefix.
func (s *Server) serveARM(w http.ResponseWriter, r *http.Request) {
	reqID := uuid.NewString()
	corr := r.Header.Get("x-ms-correlation-request-id")
	if _, err := uuid.Parse(corr); err != nil {
		corr = reqID
	}
	w.Header().Set("x-ms-request-id", reqID)
	w.Header().Set("x-ms-correlation-request-id", corr)
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("cosmosemu: panic while serving an ARM request", zap.Any("panic", p), zap.String("method", r.Method), zap.String("path", r.URL.Path))
			writeARMError(w, armErr(http.StatusInternalServerError, "InternalServerError", "An unexpected error occurred while processing the request."))
		}
	}()
	res, aerr := s.armServe(r)
	if aerr != nil {
		if aerr.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token", error_description="`+strings.ReplaceAll(aerr.msg, `"`, `'`)+`"`)
		}
		writeARMError(w, aerr)
		return
	}
	for k, vs := range res.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if res.body == nil {
		w.WriteHeader(res.status)
		return
	}
	writeARMJSON(w, res.status, res.body)
}

func writeARMJSON(w http.ResponseWriter, status int, v any) {
	writeJSONAs(w, status, "application/json; charset=utf-8", v)
}

func writeARMError(w http.ResponseWriter, e *armError) {
	writeARMJSON(w, e.status, map[string]any{"error": map[string]string{"code": e.code, "message": e.msg}})
}

// armServe authenticates, validates, authorizes and runs an ARM request.
func (s *Server) armServe(r *http.Request) (*armResult, *armError) {
	oid, aerr := s.armAuthenticate(r)
	if aerr != nil {
		return nil, aerr
	}
	apiVersion := ""
	for k, vs := range r.URL.Query() {
		if strings.EqualFold(k, "api-version") && len(vs) > 0 {
			apiVersion = vs[0]
		}
	}
	if apiVersion == "" {
		return nil, armErr(http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
	}
	ref, ok := parseARMPath(r.URL)
	if !ok {
		return nil, armErr(http.StatusNotFound, "InvalidResourceType", "cosmosemu serves no ARM resource at '%s'. It serves Microsoft.DocumentDB/databaseAccounts, their sqlDatabases and their containers.", strings.TrimPrefix(r.URL.Path, ARMPathPrefix))
	}
	allowed := []string{http.MethodGet, http.MethodPut, http.MethodDelete}
	if ref.kind != armDatabase && ref.kind != armContainer {
		allowed = allowed[:1]
	}
	if !contains(allowed, r.Method) {
		return nil, armErr(http.StatusMethodNotAllowed, "MethodNotAllowed", "The HTTP method '%s' is not supported for the resource type at '%s'; use %s.", r.Method, ref.scope(), strings.Join(allowed, ", "))
	}
	if aerr := s.armAuthorize(oid, ref.action(r.Method), ref.scope()); aerr != nil {
		return nil, aerr
	}
	switch ref.kind {
	case armOpStatus, armOpResult:
		return s.armOperationAnswer(ref)
	}
	if !strings.EqualFold(ref.account, s.opts.AccountName) {
		return nil, armErr(http.StatusNotFound, "ResourceNotFound", "The Resource 'Microsoft.DocumentDB/databaseAccounts/%s' under resource group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix", ref.account, ref.rg)
	}
	switch ref.kind {
	case armDatabase:
		return s.armDatabaseOp(r, ref, apiVersion)
	case armContainer:
		return s.armContainerOp(r, ref, apiVersion)
	}
	return &armResult{status: http.StatusOK, body: s.armAccountJSON(ref)}, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// armAuthenticate checks the bearer token as ARM does and returns its oid.
func (s *Server) armAuthenticate(r *http.Request) (string, *armError) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", armErr(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	}
	scheme, tok, _ := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", armErr(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is provided in an invalid format.")
	}
	claims, why := parseToken(tok)
	switch {
	case why == whyExpired:
		exp, _ := claims["exp"].(float64)
		return "", armErr(http.StatusUnauthorized, "ExpiredAuthenticationToken", "The access token expiry UTC time '%s' is earlier than current UTC time '%s'.",
			time.Unix(int64(exp), 0).UTC().Format(time.RFC1123), time.Now().UTC().Format(time.RFC1123))
	case why != "":
		return "", armErr(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid (%s).", why)
	}
	if _, ok := claims["exp"].(float64); !ok {
		return "", armErr(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid (no expiry).")
	}
	aud, _ := claims["aud"].(string)
	if !contains(armAudiences, strings.TrimSuffix(aud, "/")) {
		return "", armErr(http.StatusUnauthorized, "InvalidAuthenticationTokenAudience",
			"The access token has been obtained for wrong audience or resource '%s'. It should exactly match with one of the allowed audiences 'https://management.core.windows.net/','https://management.core.windows.net','https://management.azure.com/','https://management.azure.com'.", aud)
	}
	if a := s.auth.Load(); a != nil && a.TenantID != "" && !ofTenant(claims, a.TenantID) {
		iss, _ := claims["iss"].(string)
		return "", armErr(http.StatusUnauthorized, "InvalidAuthenticationTokenTenant",
			"The access token is from the wrong issuer '%s'. It must match the tenant 'https://sts.windows.net/%s/' associated with this subscription. Please use the authority (URL) 'https://login.windows.net/%s' to get the token.", iss, a.TenantID, a.TenantID)
	}
	oid, _ := claims["oid"].(string)
	if oid == "" {
		return "", armErr(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid (no object id).")
	}
	return oid, nil
}

// armAuthorize checks the principal against AuthOptions.ManagementPrincipals.
func (s *Server) armAuthorize(oid, action, scope string) *armError {
	a := s.auth.Load()
	if a == nil || len(a.ManagementPrincipals) == 0 {
		return nil
	}
	for _, p := range a.ManagementPrincipals {
		if strings.EqualFold(p, oid) {
			return nil
		}
	}
	return armErr(http.StatusForbidden, "AuthorizationFailed",
		"The client '%s' with object id '%s' does not have authorization to perform action '%s' over scope '%s' or the scope is invalid. If access was recently granted, please refresh your credentials.",
		oid, oid, action, scope)
}

// armLocation is the region as ARM names locations.
func (s *Server) armLocation() string {
	return strings.ToLower(strings.ReplaceAll(s.opts.Region, " ", ""))
}

func (s *Server) armAccountJSON(ref armRef) map[string]any {
	caps := []any{}
	if s.opts.Serverless {
		caps = append(caps, map[string]any{"name": "EnableServerless"})
	}
	disableLocal := false
	if a := s.auth.Load(); a != nil {
		disableLocal = a.DisableLocalAuth
	}
	name := s.opts.AccountName
	return map[string]any{
		"id": ref.accountID(name), "name": name, "type": armTypeAccount, "location": s.armLocation(), "kind": "GlobalDocumentDB",
		"properties": map[string]any{
			"provisioningState": "Succeeded", "documentEndpoint": s.endpoint, "databaseAccountOfferType": "Standard",
			"consistencyPolicy": map[string]any{"defaultConsistencyLevel": s.opts.ConsistencyLevel},
			"capabilities":      caps,
			"locations": []any{map[string]any{"id": name + "-" + s.armLocation(), "locationName": s.opts.Region,
				"documentEndpoint": s.endpoint, "provisioningState": "Succeeded", "failoverPriority": 0, "isZoneRedundant": false}},
			"disableLocalAuth": disableLocal,
		},
	}
}

// armOptions renders an offer as ARM's options (nil when there is none).
func (s *Server) armOptions(offerID string) map[string]any {
	if offerID == "" {
		return nil
	}
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	o := s.store.offers[offerID]
	switch {
	case o == nil:
		return nil
	case o.autoscaleMax > 0:
		return map[string]any{"autoscaleSettings": map[string]any{"maxThroughput": o.autoscaleMax}}
	default:
		return map[string]any{"throughput": o.manual}
	}
}

func (s *Server) armDatabaseJSON(ref armRef, db *database) map[string]any {
	res := db.toJSON()
	delete(res, "_self")
	props := map[string]any{"resource": res}
	s.store.mu.RLock()
	offerID := db.offerID
	s.store.mu.RUnlock()
	if o := s.armOptions(offerID); o != nil {
		props["options"] = o
	}
	return map[string]any{"id": ref.databaseID(s.opts.AccountName), "name": db.id, "type": armTypeDatabase, "properties": props}
}

func (s *Server) armContainerJSON(ref armRef, c *container) map[string]any {
	res := c.toJSON()
	for _, k := range []string{"_self", "_docs", "_sprocs", "_triggers", "_udfs", "_conflicts"} {
		delete(res, k)
	}
	props := map[string]any{"resource": res}
	c.mu.RLock()
	offerID := c.offerID
	c.mu.RUnlock()
	if o := s.armOptions(offerID); o != nil {
		props["options"] = o
	}
	return map[string]any{"id": ref.containerID(s.opts.AccountName), "name": c.id, "type": armTypeContainer, "properties": props}
}

// armBody is a PUT's resource and its throughput options in the form
// throughputFor takes.
type armBody struct {
	resource     map[string]any
	manual, auto string
}

// parseARMBody reads a create-or-update body and checks that its resource
// id is name.
func parseARMBody(r *http.Request, name string) (*armBody, *armError) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxARMBody+1))
	if err != nil {
		return nil, armErr(http.StatusBadRequest, "InvalidRequestContent", "The request content could not be read.")
	}
	if len(b) > maxARMBody {
		return nil, armErr(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "The request content exceeds %d bytes.", maxARMBody)
	}
	var body struct {
		Properties *struct {
			Resource json.RawMessage `json:"resource"`
			Options  *struct {
				Throughput        json.RawMessage `json:"throughput"`
				AutoscaleSettings json.RawMessage `json:"autoscaleSettings"`
			} `json:"options"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, armErr(http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: '%s'.", err.Error())
	}
	if body.Properties == nil || len(body.Properties.Resource) == 0 || string(body.Properties.Resource) == "null" {
		return nil, armErr(http.StatusBadRequest, "BadRequest", "The request content must have properties.resource.")
	}
	res, aerr := parseDocument(body.Properties.Resource)
	if aerr != nil {
		return nil, armFromAPI(aerr)
	}
	if id, _ := res["id"].(string); id != name {
		return nil, armErr(http.StatusBadRequest, "BadRequest", "The resource id '%v' in the request body does not match the name '%s' in the request path.", res["id"], name)
	}
	out := &armBody{resource: res}
	raw := func(m json.RawMessage) string {
		if t := strings.TrimSpace(string(m)); t != "null" {
			return t
		}
		return ""
	}
	if o := body.Properties.Options; o != nil {
		out.manual, out.auto = raw(o.Throughput), raw(o.AutoscaleSettings)
	}
	return out, nil
}

func (s *Server) armDatabaseOp(r *http.Request, ref armRef, apiVersion string) (*armResult, *armError) {
	switch r.Method {
	case http.MethodGet:
		db := s.store.database(ref.db)
		if db == nil {
			return nil, armErr(http.StatusNotFound, "ResourceNotFound", "The SQL database '%s' was not found in account '%s'.", ref.db, s.opts.AccountName)
		}
		return &armResult{status: http.StatusOK, body: s.armDatabaseJSON(ref, db)}, nil
	case http.MethodPut:
		body, aerr := parseARMBody(r, ref.db)
		if aerr != nil {
			return nil, aerr
		}
		db := s.store.database(ref.db)
		if db != nil {
			if _, err := s.throughputFor(body.manual, body.auto, "database"); err != nil {
				return nil, armFromAPI(err)
			}
		} else {
			var err *apiError
			if db, err = s.createDatabase(body.resource, body.manual, body.auto); err != nil {
				return nil, armFromAPI(err)
			}
		}
		return &armResult{status: http.StatusOK, body: s.armDatabaseJSON(ref, db)}, nil
	default: // DELETE
		if _, err := s.store.deleteDatabase(ref.db); err != nil {
			return &armResult{status: http.StatusNoContent}, nil
		}
		return s.armAccepted(r, ref, apiVersion), nil
	}
}

func (s *Server) armContainerOp(r *http.Request, ref armRef, apiVersion string) (*armResult, *armError) {
	notFound := func() *armError {
		return armErr(http.StatusNotFound, "ResourceNotFound", "The SQL container '%s' was not found in database '%s' of account '%s'.", ref.coll, ref.db, s.opts.AccountName)
	}
	db := s.store.database(ref.db)
	switch r.Method {
	case http.MethodGet:
		c, err := s.store.container(ref.db, ref.coll)
		if err != nil {
			return nil, notFound()
		}
		return &armResult{status: http.StatusOK, body: s.armContainerJSON(ref, c)}, nil
	case http.MethodPut:
		body, aerr := parseARMBody(r, ref.coll)
		if aerr != nil {
			return nil, aerr
		}
		if db == nil {
			return nil, armErr(http.StatusNotFound, "ResourceNotFound", "The SQL database '%s' was not found in account '%s'.", ref.db, s.opts.AccountName)
		}
		c, _ := s.store.container(ref.db, ref.coll)
		if c != nil {
			if _, err := s.throughputFor(body.manual, body.auto, "container"); err != nil {
				return nil, armFromAPI(err)
			}
			if err := s.replaceContainer(c, body.resource, ""); err != nil {
				return nil, armFromAPI(err)
			}
		} else {
			var err *apiError
			if c, err = s.createContainer(db, body.resource, body.manual, body.auto); err != nil {
				return nil, armFromAPI(err)
			}
		}
		return &armResult{status: http.StatusOK, body: s.armContainerJSON(ref, c)}, nil
	default: // DELETE
		if db == nil {
			return &armResult{status: http.StatusNoContent}, nil
		}
		if _, err := s.store.deleteContainer(db, ref.coll); err != nil {
			return &armResult{status: http.StatusNoContent}, nil
		}
		return s.armAccepted(r, ref, apiVersion), nil
	}
}

// armAccepted records a completed operation and answers 202 with the
// headers ARM clients poll, on the host the request addressed.
func (s *Server) armAccepted(r *http.Request, ref armRef, apiVersion string) *armResult {
	opID := uuid.NewString()
	base := "/subscriptions/" + ref.sub + "/providers/Microsoft.DocumentDB/locations/" + s.armLocation()
	now := time.Now().UTC()
	s.armOps.Store(strings.ToLower(opID), armOperation{id: base + "/operationsStatus/" + opID, start: now, end: now})
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	poll := func(kind string) string {
		u := url.URL{Scheme: scheme, Host: r.Host, Path: ARMPathPrefix + base + "/" + kind + "/" + opID, RawQuery: url.Values{"api-version": {apiVersion}}.Encode()}
		return u.String()
	}
	h := http.Header{}
	h.Set("Azure-AsyncOperation", poll("operationsStatus"))
	h.Set("Location", poll("operationResults"))
	return &armResult{status: http.StatusAccepted, header: h}
}

// armOperationAnswer answers the polling of an operation armAccepted
// recorded: operationsStatus with its status, operationResults with 204.
func (s *Server) armOperationAnswer(ref armRef) (*armResult, *armError) {
	v, ok := s.armOps.Load(strings.ToLower(ref.operation))
	if !ok {
		return nil, armErr(http.StatusNotFound, "ResourceNotFound", "The operation '%s' was not found.", ref.operation)
	}
	if ref.kind == armOpResult {
		return &armResult{status: http.StatusNoContent}, nil
	}
	op := v.(armOperation)
	return &armResult{status: http.StatusOK, body: map[string]any{
		"id": op.id, "name": ref.operation, "status": "Succeeded",
		"startTime": op.start.Format(time.RFC3339Nano), "endTime": op.end.Format(time.RFC3339Nano),
	}}, nil
}
