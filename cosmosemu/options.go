package cosmosemu

import (
	"net/http"
	"time"

	"github.com/durafeed/durafeed/internal/clock"
	"go.uber.org/zap"
)

// WellKnownKey is the master key every Azure Cosmos DB emulator accepts by
// default. It is public and grants nothing outside an emulator.
const WellKnownKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// Default values applied by Start for zero-valued Options fields.
const (
	DefaultAddr               = "127.0.0.1:0"
	DefaultPartitionCount     = 4
	DefaultConsistencyLevel   = "Strong"
	DefaultRegion             = "South Central US"
	defaultMaxDocumentBytes   = 2 * 1024 * 1024
	defaultMaxResponseBytes   = 4 * 1024 * 1024
	defaultQueryPageSize      = 100
	defaultChangeFeedPageSize = 100
	maxBatchOperations        = 100
	maxPatchOperations        = 10
	maxIDBytes                = 1023
)

// DefaultAccountName is the account's name when neither
// Options.AccountName nor AuthOptions.AccountName is set.
const DefaultAccountName = "cosmosemu"

// DefaultTenantID is the tenant the managed-identity token endpoint's
// tokens name when neither IdentityOptions.TenantID nor
// AuthOptions.TenantID is set.
const DefaultTenantID = "cafecafe-0000-4000-8000-000000000001"

// Options configures a Server. The zero value is usable: every field has a
// documented default.
type Options struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:0" (a free
	// loopback port; read it back with Server.Endpoint).
	Addr string

	// PlainHTTP serves http:// instead of https://. Default false: HTTPS with
	// a self-signed certificate generated at start for localhost, 127.0.0.1
	// and ::1 (see Server.Certificate, Server.HTTPClient).
	PlainHTTP bool

	// Key is the base64 master key requests must be signed with. Default
	// WellKnownKey.
	Key string

	// PartitionCount is the number of physical partition key ranges each new
	// container gets, splitting the EPK space evenly. Default 4.
	PartitionCount int

	// ConsistencyLevel is the account's default consistency reported by the
	// database account resource. Default "Strong" (the emulator is a single
	// replica, so every read is strongly consistent).
	ConsistencyLevel string

	// Region is the name of the single region the account reports. Default
	// "South Central US". The ARM surface reports it as a location
	// ("southcentralus": lowercase, without spaces).
	Region string

	// AccountName is the account's name: the one databaseAccounts name
	// the ARM surface (ARMPathPrefix) serves, and the name refusals give
	// when AuthOptions.AccountName is empty. Default: Auth's AccountName
	// when set, else DefaultAccountName ("cosmosemu").
	AccountName string

	// Serverless makes the account a serverless one, as Azure Cosmos DB
	// serverless accounts behave: a database or container create that asks
	// for dedicated throughput (data plane x-ms-offer-throughput or
	// x-ms-cosmos-offer-autopilot-settings; ARM options.throughput or
	// options.autoscaleSettings) answers 400 BadRequest "Setting offer
	// throughput or autopilot on container is not supported for serverless
	// accounts." ("database" for a database), reading, querying or
	// replacing offers answers 400 "Reading or replacing offers is not
	// supported for serverless accounts.", and no resource has an offer.
	// The data plane's account resource (GET /) is the same as a
	// provisioned account's, as the service's is; the ARM account reports
	// the EnableServerless capability. Default false: provisioned
	// throughput.
	Serverless bool

	// Identity serves a managed-identity token endpoint at
	// AdminPathPrefix+"identity/token" (Server.IdentityEndpoint), shaped as
	// the App Service / Container Apps identity endpoint is, so that
	// azidentity's ManagedIdentityCredential and DefaultAzureCredential in
	// any process with IDENTITY_ENDPOINT and IDENTITY_HEADER set obtain
	// tokens the data plane and the ARM surface accept. Default nil: no
	// token endpoint.
	Identity *IdentityOptions

	// Auth makes the emulator enforce what an account with Microsoft
	// Entra ID enforces: local (key) authentication disabled, token
	// audience, tenant and expiry, data-plane role assignments, no
	// management operations by token on the data plane, and who may manage
	// through the ARM surface. Default nil: any key-signed request with the
	// key and any well-formed, unexpired token are served (ARM still wants
	// an ARM audience).
	Auth *AuthOptions

	// Logger receives operational logs (never keys or document bodies).
	// Default zap.NewNop().
	Logger *zap.Logger

	// Middleware wraps every Cosmos DB request after authentication and
	// routing, in order (the first element is the outermost). It is the
	// seam for latency, fault injection, request charges and per-operation
	// counters. Requests to the ARM surface (ARMPathPrefix) and the admin
	// surface (AdminPathPrefix) are not Cosmos DB requests and never pass
	// through it. Default none.
	Middleware []Middleware

	// Admin serves emulator-level operations for test tooling under the
	// reserved path prefix AdminPathPrefix ("/_emulator/"), which never
	// reaches the Cosmos DB surface. Requests there are served WITHOUT Cosmos
	// DB authentication, so expose the endpoint only to trusted tooling. The
	// prefix is stripped before Admin sees the request ("/_emulator/faults"
	// arrives as "/faults"). The emulator's own operations take precedence:
	//
	//	POST /split   {"database":"db","container":"c","range":"0"} → 200
	//	              {"parent":"0","children":["4","5"]} (Server.SplitPartition;
	//	              404 unknown database, container or range)
	//	GET  /ranges?database=db&container=c → 200 [PartitionKeyRange]
	//	GET  /identity/token?... → the managed-identity token endpoint
	//	              (IdentityOptions; only with Options.Identity)
	//
	// Every other path is delegated to Admin, e.g. a knobs package admin
	// handler. Default nil: other paths answer 404.
	Admin http.Handler

	// Clock is the emulator's source of the current time: the _ts of
	// databases, containers, offers and items, the times the change feed's
	// If-Modified-Since start compares against, and time-to-live expiry
	// (an item is invisible from the second its _ts plus its time to live
	// is reached). Tests advance it to expire items without sleeping.
	// Request authentication (x-ms-date skew, Entra ID token expiry) and the
	// TLS certificate always use the real time, since clients sign with it.
	// Default: real time (time.Now).
	Clock Clock

	// DisableQueryIndex makes every document query scan the partitions it
	// targets instead of selecting candidates through the secondary
	// indexes (see the package documentation). Results, their order and
	// continuations are the same either way; only the work done, and the
	// emulator's own request charge (2.79 + 0.05 per document examined),
	// differ. It exists to compare the two. Default false: indexes are used.
	DisableQueryIndex bool
}

// Clock is a source of the current time. Every durafeed clock
// (changefeed.Clock, engine.Clock, wakeup.Clock) satisfies it, so one
// manual clock can drive the emulator and the code under test.
type Clock interface {
	// Now returns the current time. It must be safe for concurrent use.
	Now() time.Time
}

func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Key == "" {
		o.Key = WellKnownKey
	}
	if o.PartitionCount <= 0 {
		o.PartitionCount = DefaultPartitionCount
	}
	if o.ConsistencyLevel == "" {
		o.ConsistencyLevel = DefaultConsistencyLevel
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.AccountName == "" {
		o.AccountName = DefaultAccountName
		if o.Auth != nil && o.Auth.AccountName != "" {
			o.AccountName = o.Auth.AccountName
		}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	return o
}
