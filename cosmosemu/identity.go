package cosmosemu

import (
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"
)

// IdentityPath is the path of the managed-identity token endpoint
// (Options.Identity): IDENTITY_ENDPOINT is the emulator's endpoint without
// its trailing slash followed by it (Server.IdentityEndpoint). It is under
// AdminPathPrefix, so Cosmos DB authentication does not apply; the
// X-IDENTITY-HEADER secret does, as on the real endpoint.
const IdentityPath = AdminPathPrefix + "identity/token"

// identityAPIVersion is the App Service identity protocol version served
// (the one azidentity, through MSAL, speaks).
const identityAPIVersion = "2019-08-01"

// IdentityOptions configure the managed-identity token endpoint, which
// behaves as the App Service / Container Apps identity endpoint (API
// version 2019-08-01) does:
//
//	GET <IdentityPath>?resource=<audience>&api-version=2019-08-01[&client_id=...]
//	X-IDENTITY-HEADER: <Header>
//
// answers 200 {"access_token","expires_on" (Unix seconds, as a string),
// "resource","token_type":"Bearer","client_id"}, the token minted by
// TokenCredential for the principal below with aud the resource (so
// resource https://127.0.0.1 serves the data plane,
// https://management.azure.com the ARM surface). A missing
// X-IDENTITY-HEADER answers 400, a wrong one 401, a missing resource or an
// api-version other than 2019-08-01 400, a principal_id or object_id other
// than ObjectID 400 (the emulator has one identity; client_id and
// mi_res_id are accepted as naming it and client_id is echoed), any method
// but GET 405; errors are {"statusCode","message","correlationId"}.
//
// azidentity's ManagedIdentityCredential (and DefaultAzureCredential,
// which tries it) uses this endpoint when IDENTITY_ENDPOINT and
// IDENTITY_HEADER are set and IDENTITY_SERVER_THUMBPRINT is not. Over
// HTTPS the process must trust the emulator's certificate: through the
// credential's ClientOptions.Transport (e.g. Server.HTTPClient), or, for a
// process that cannot be configured, SSL_CERT_FILE naming the PEM of
// Server.CertificatePEM (honoured by Go's system roots on Linux and the
// other Unix systems but not on macOS or Windows). MSAL caches managed
// identity tokens process-wide by client id and resource, so a process
// that reaches two emulators with one identity may get the first one's
// token.
type IdentityOptions struct {
	// Header is the secret clients must send as X-IDENTITY-HEADER (the
	// IDENTITY_HEADER environment variable). Required.
	Header string
	// TenantID is the tid of the tokens. Default: AuthOptions.TenantID
	// when set at the time of the request, else DefaultTenantID.
	TenantID string
	// ObjectID is the oid of the tokens: the principal role assignments
	// and AuthOptions.ManagementPrincipals name. Required.
	ObjectID string
	// TTL is the tokens' lifetime (default one hour, as TokenCredential's).
	TTL time.Duration
}

// IdentityEndpoint is the URL to set IDENTITY_ENDPOINT to, or "" when
// Options.Identity is nil.
func (s *Server) IdentityEndpoint() string {
	if s.opts.Identity == nil {
		return ""
	}
	return strings.TrimSuffix(s.endpoint, "/") + IdentityPath
}

// identityError answers as the App Service identity endpoint does.
func identityError(w http.ResponseWriter, status int, msg string) {
	adminJSON(w, status, map[string]any{"statusCode": status, "message": msg, "correlationId": uuid.NewString()})
}

// serveIdentityToken serves IdentityPath (prefix stripped: "/identity/token").
func (s *Server) serveIdentityToken(w http.ResponseWriter, r *http.Request) {
	id := s.opts.Identity
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		identityError(w, http.StatusMethodNotAllowed, "The requested method is not allowed; use GET.")
		return
	}
	got := r.Header.Get("X-IDENTITY-HEADER")
	if got == "" {
		identityError(w, http.StatusBadRequest, "The X-IDENTITY-HEADER header is missing.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(id.Header)) != 1 {
		identityError(w, http.StatusUnauthorized, "The X-IDENTITY-HEADER header is invalid.")
		return
	}
	q := r.URL.Query()
	if v := q.Get("api-version"); v != identityAPIVersion {
		identityError(w, http.StatusBadRequest, "The api-version '"+v+"' is not supported; use "+identityAPIVersion+".")
		return
	}
	resource := q.Get("resource")
	if resource == "" {
		identityError(w, http.StatusBadRequest, "The resource query parameter is required.")
		return
	}
	for _, k := range []string{"principal_id", "object_id"} {
		if v := q.Get(k); v != "" && !strings.EqualFold(v, id.ObjectID) {
			identityError(w, http.StatusBadRequest, "Unable to load the proper Managed Identity: no identity with "+k+" '"+v+"' is assigned.")
			return
		}
	}
	tenant := id.TenantID
	if tenant == "" {
		tenant = DefaultTenantID
		if a := s.auth.Load(); a != nil && a.TenantID != "" {
			tenant = a.TenantID
		}
	}
	tok, err := TokenCredential{TenantID: tenant, ObjectID: id.ObjectID, TTL: id.TTL}.GetToken(r.Context(), policy.TokenRequestOptions{Scopes: []string{resource}})
	if err != nil {
		identityError(w, http.StatusInternalServerError, err.Error())
		return
	}
	clientID := q.Get("client_id")
	if clientID == "" {
		clientID = id.ObjectID
	}
	adminJSON(w, http.StatusOK, map[string]string{
		"access_token": tok.Token, "expires_on": strconv.FormatInt(tok.ExpiresOn.Unix(), 10),
		"resource": resource, "token_type": "Bearer", "client_id": clientID,
	})
}
