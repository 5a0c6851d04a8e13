package cosmosemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Built-in data-plane role definitions of Azure Cosmos DB for NoSQL.
const (
	// DataReaderRole is "Cosmos DB Built-in Data Reader": read metadata,
	// read items, run queries, read the change feed.
	DataReaderRole = "00000000-0000-0000-0000-000000000001"
	// DataContributorRole is "Cosmos DB Built-in Data Contributor": read
	// metadata, and every action on containers and items.
	DataContributorRole = "00000000-0000-0000-0000-000000000002"
)

// Data-plane actions (Azure Cosmos DB for NoSQL's native role-based access
// control).
const (
	ActionReadMetadata   = "Microsoft.DocumentDB/databaseAccounts/readMetadata"
	actionContainers     = "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/"
	ActionItemsCreate    = actionContainers + "items/create"
	ActionItemsRead      = actionContainers + "items/read"
	ActionItemsReplace   = actionContainers + "items/replace"
	ActionItemsUpsert    = actionContainers + "items/upsert"
	ActionItemsDelete    = actionContainers + "items/delete"
	ActionExecuteQuery   = actionContainers + "executeQuery"
	ActionReadChangeFeed = actionContainers + "readChangeFeed"
)

// Substatus codes of the service's authorization refusals.
const (
	subStatusLocalAuthDisabled = 5202
	subStatusAADControlPlane   = 5300
	subStatusRBACDenied        = 5301
)

// AuthOptions make the emulator enforce what an Azure Cosmos DB account
// with Microsoft Entra ID enforces. Without them (Options.Auth nil) any
// well-formed, unexpired token is accepted with every permission, as
// Microsoft's emulator does.
type AuthOptions struct {
	// DisableLocalAuth refuses key-signed requests, as an account with
	// disableLocalAuth does (401, substatus 5202).
	DisableLocalAuth bool
	// TenantID, when set, is the only tenant whose tokens are accepted:
	// the tid claim, and an issuer of that tenant.
	TenantID string
	// Audiences are the accepted aud claims. Default: the account's
	// scope as the SDKs request it (https://<host of the endpoint>) and
	// https://cosmos.azure.com.
	Audiences []string
	// RoleAssignments grant principals (a token's oid) data-plane roles.
	// A token request is served only when an assignment covers its
	// action and resource (403, substatus 5301, naming the action,
	// otherwise). Database and container management (create, replace,
	// delete, throughput) is refused to tokens whatever the roles (403,
	// substatus 5300), as the service refuses it.
	RoleAssignments []RoleAssignment
	// AccountName names the account in data-plane refusals. Default:
	// Options.AccountName.
	AccountName string
	// ManagementPrincipals are the object ids (a token's oid) allowed to
	// manage the account through the ARM surface (ARMPathPrefix), as
	// holders of an ARM role such as DocumentDB Account Contributor are:
	// reading the account, and reading, creating, updating and deleting
	// its SQL databases and containers. Others' ARM requests answer 403
	// AuthorizationFailed. Empty: any token the ARM surface authenticates
	// may manage.
	ManagementPrincipals []string
}

// RoleAssignment grants a principal one of the built-in data-plane roles
// on a scope.
type RoleAssignment struct {
	// PrincipalID is the principal's object id (the token's oid).
	PrincipalID string
	// RoleDefinitionID is DataReaderRole or DataContributorRole.
	RoleDefinitionID string
	// Scope is "/" (the account), "/dbs/<database>" or
	// "/dbs/<database>/colls/<container>".
	Scope string
}

// roleActions lists each built-in role's actions; a trailing "*" covers
// every action with that prefix.
func roleActions(role string) []string {
	switch role {
	case DataReaderRole:
		return []string{ActionReadMetadata, ActionExecuteQuery, ActionReadChangeFeed, ActionItemsRead}
	case DataContributorRole:
		return []string{ActionReadMetadata, actionContainers + "*"}
	}
	return nil
}

func grants(role, action string) bool {
	for _, a := range roleActions(role) {
		if a == action || strings.HasSuffix(a, "*") && strings.HasPrefix(action, strings.TrimSuffix(a, "*")) {
			return true
		}
	}
	return false
}

// principal is the caller a token names.
type principal struct {
	oid string
}

// covers reports whether scope covers resource (both "/"-rooted paths).
func covers(scope, resource string) bool {
	scope = strings.TrimSuffix(scope, "/")
	return scope == "" || resource == scope || strings.HasPrefix(resource, scope+"/")
}

// authorize checks an Entra ID request against the role assignments:
// management operations are refused to tokens, and a data operation needs
// an assignment granting its action on a scope covering its resource.
// Reading metadata is granted by an assignment anywhere on the path from
// the account to the resource or below it (an SDK scoped to one container
// still reads the account and database).
func (s *Server) authorize(p *principal, req *Request) *apiError {
	a := s.auth.Load()
	if a == nil {
		return nil
	}
	r := req.HTTP
	resource := "/" + strings.Trim(req.ResourceLink, "/")
	actions, control := requiredActions(req)
	if control {
		return newErrSub(http.StatusForbidden, subStatusAADControlPlane, fmt.Sprintf(
			"Request blocked by Auth %s : The given request [%s %s] cannot be authorized by AAD token in data plane. Learn more: https://aka.ms/cosmos-native-rbac.",
			s.refusalAccount(a), r.Method, r.URL.Path))
	}
	scopeOf := collectionScope(resource)
	for _, action := range actions {
		ok := false
		for _, ra := range a.RoleAssignments {
			if ra.PrincipalID != p.oid || !grants(ra.RoleDefinitionID, action) {
				continue
			}
			if covers(ra.Scope, scopeOf) || (action == ActionReadMetadata && covers(scopeOf, ra.Scope)) {
				ok = true
				break
			}
		}
		if !ok {
			return newErrSub(http.StatusForbidden, subStatusRBACDenied, fmt.Sprintf(
				"Request blocked by Auth %s : Request is blocked because principal [%s] does not have required RBAC permissions to perform action [%s] on resource [%s]. Learn more: https://aka.ms/cosmos-native-rbac.",
				s.refusalAccount(a), p.oid, action, scopeOf))
		}
	}
	return nil
}

// refusalAccount is the account name data-plane refusals give.
func (s *Server) refusalAccount(a *AuthOptions) string {
	if a.AccountName == "" {
		return s.opts.AccountName
	}
	return a.AccountName
}

// collectionScope cuts a resource path to the scope roles are assigned
// on: the account, a database or a container ("/dbs/d/colls/c/docs/x"
// is "/dbs/d/colls/c").
func collectionScope(resource string) string {
	parts := strings.Split(strings.Trim(resource, "/"), "/")
	if len(parts) > 4 {
		parts = parts[:4]
	}
	return "/" + strings.Join(parts, "/")
}

// requiredActions returns the data actions a request needs, or control
// true for a management operation no token may do.
func requiredActions(req *Request) (actions []string, control bool) {
	r := req.HTTP
	switch req.ResourceType {
	case ResourceAccount, ResourcePartitionKeyRange:
		return []string{ActionReadMetadata}, false
	case ResourceDatabase, ResourceContainer:
		// Reading and querying databases and containers is reading
		// metadata; creating, replacing and deleting them is management.
		if r.Method == http.MethodGet || r.Method == http.MethodHead || req.Operation == OpQuery {
			return []string{ActionReadMetadata}, false
		}
		return nil, true
	case ResourceOffer:
		return nil, true
	case ResourceDocument:
		switch req.Operation {
		case OpRead, OpReadFeed:
			return []string{ActionItemsRead}, false
		case OpCreate:
			return []string{ActionItemsCreate}, false
		case OpUpsert:
			return []string{ActionItemsUpsert}, false
		case OpReplace, OpPatch:
			return []string{ActionItemsReplace}, false
		case OpDelete:
			return []string{ActionItemsDelete}, false
		case OpQuery, OpQueryPlan:
			return []string{ActionExecuteQuery}, false
		case OpChangeFeed:
			return []string{ActionReadChangeFeed}, false
		case OpBatch:
			return batchActions(req.body), false
		}
	}
	return nil, true
}

// batchActions returns the actions of a transactional batch's operations.
func batchActions(body []byte) []string {
	var ops []struct {
		OperationType string `json:"operationType"`
	}
	_ = json.Unmarshal(body, &ops) // a malformed batch is refused by its handler
	seen := map[string]bool{}
	var out []string
	for _, op := range ops {
		var a string
		switch strings.ToLower(op.OperationType) {
		case "create":
			a = ActionItemsCreate
		case "upsert":
			a = ActionItemsUpsert
		case "replace", "patch":
			a = ActionItemsReplace
		case "delete":
			a = ActionItemsDelete
		default:
			a = ActionItemsRead
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}
