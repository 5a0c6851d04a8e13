package cosmosemu

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file serves the database account, databases and containers.

func (s *Server) handleAccount(req *Request) *Response {
	loc := []any{map[string]any{"name": s.opts.Region, "databaseAccountEndpoint": s.account}}
	qcfg, _ := json.Marshal(map[string]any{
		"maxSqlQueryInputLength": 262144, "maxJoinsPerSqlQuery": 5, "maxLogicalAndPerSqlQuery": 500,
		"maxLogicalOrPerSqlQuery": 500, "maxUdfRefPerSqlQuery": 10, "maxInExpressionItemsCount": 16000,
		"queryMaxInMemorySortDocumentCount": 500, "maxQueryRequestTimeoutFraction": 0.9,
		"sqlAllowNonFiniteNumbers": false, "sqlAllowAggregateFunctions": true, "sqlAllowSubQuery": true,
		"sqlAllowScalarSubQuery": true, "allowNewKeywordsAsIdentifiers": true, "enableSpatialIndexing": true,
		"maxSpatialQueryCells": 12, "spatialMaxGeometryPointCount": 256, "sqlDisableOptimizationFlags": 0,
		"sqlEnableParameterExpansionCheck": true,
	})
	body := map[string]any{
		"_self": "", "id": "localhost", "_rid": "localhost", "media": "//media/", "addresses": "//addresses/",
		"_dbs": "//dbs/", "writableLocations": loc, "readableLocations": loc,
		"enableMultipleWriteLocations": false, "continuousBackupEnabled": false, "enableNRegionSynchronousCommit": false,
		"userReplicationPolicy":    map[string]any{"asyncReplication": false, "minReplicaSetSize": 1, "maxReplicasetSize": 4},
		"userConsistencyPolicy":    map[string]any{"defaultConsistencyLevel": s.opts.ConsistencyLevel},
		"systemReplicationPolicy":  map[string]any{"minReplicaSetSize": 1, "maxReplicasetSize": 4},
		"readPolicy":               map[string]any{"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
		"queryEngineConfiguration": string(qcfg),
	}
	b, _ := json.Marshal(body)
	resp := jsonResponse(http.StatusOK, b, 0)
	resp.Header.Set("x-ms-max-media-storage-usage-mb", "10240")
	resp.Header.Set("x-ms-media-storage-usage-mb", "0")
	resp.Header.Set("x-ms-databaseaccount-consumed-mb", "0")
	resp.Header.Set("x-ms-databaseaccount-reserved-mb", "0")
	resp.Header.Set("x-ms-databaseaccount-provisioned-mb", "0")
	return resp
}

// validateName applies the service's rules for database and container ids.
func validateName(v any) (string, *apiError) {
	id, ok := v.(string)
	if !ok || id == "" {
		return "", errBadRequest(msgMissingID)
	}
	if strings.ContainsAny(id, "/\\?#") || strings.HasSuffix(id, " ") || utf8.RuneCountInString(id) > 255 {
		return "", errBadRequest("The input name '%s' is invalid. Ensure to provide a unique non-empty string less than '255' characters. Make sure to not include any of the characters '/', '\\', '?', '#' or end with a space.", id)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return "", errBadRequest("The input name '%s' is invalid. Control characters are not allowed.", id)
		}
	}
	return id, nil
}

func (db *database) toJSON() map[string]any {
	return map[string]any{
		"id": db.id, "_rid": db.rid, "_self": "dbs/" + db.rid + "/", "_etag": db.etag,
		"_colls": "colls/", "_users": "users/", "_ts": float64(db.ts),
	}
}

// toJSON renders the container as the service returns it (caller need not
// hold c.mu).
func (c *container) toJSON() map[string]any {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]any, len(c.props)+12)
	for k, v := range c.props {
		out[k] = v
	}
	out["id"] = c.id
	out["partitionKey"] = c.pkDef.toJSON()
	out["_rid"] = c.rid
	out["_self"] = "dbs/" + c.db.rid + "/colls/" + c.rid + "/"
	out["_etag"] = c.etag
	out["_ts"] = float64(c.ts)
	out["_docs"] = "docs/"
	out["_sprocs"] = "sprocs/"
	out["_triggers"] = "triggers/"
	out["_udfs"] = "udfs/"
	out["_conflicts"] = "conflicts/"
	return out
}

func marshalResource(status int, v any, etag string) *Response {
	b, _ := json.Marshal(v)
	resp := jsonResponse(status, b, 1)
	if etag != "" {
		resp.Header.Set("etag", etag)
	}
	return resp
}

func feedBody(rid, key string, items []any) []byte {
	if items == nil {
		items = []any{}
	}
	b, _ := json.Marshal(map[string]any{"_rid": rid, key: items, "_count": len(items)})
	return b
}

func feedResponse(rid, key string, items []any) *Response {
	resp := jsonResponse(http.StatusOK, feedBody(rid, key, items), 1)
	resp.Header.Set("x-ms-item-count", strconv.Itoa(len(items)))
	return resp
}

func (s *Server) handleDatabase(req *Request) (*Response, *apiError) {
	switch req.Operation {
	case OpReadFeed, OpQuery:
		var items []map[string]any
		for _, db := range s.store.listDatabases() {
			items = append(items, db.toJSON())
		}
		out, err := s.filterResources(req, items)
		if err != nil {
			return nil, err
		}
		return feedResponse("", "Databases", out), nil
	case OpCreate:
		body, err := parseDocument(req.body)
		if err != nil {
			return nil, err
		}
		h := req.HTTP.Header
		db, err := s.createDatabase(body, h.Get(headerOfferThroughput), h.Get(headerAutopilot))
		if err != nil {
			return nil, err
		}
		return marshalResource(http.StatusCreated, db.toJSON(), db.etag), nil
	case OpRead:
		db := s.store.database(req.Database)
		if db == nil {
			return nil, errNotFound()
		}
		return marshalResource(http.StatusOK, db.toJSON(), db.etag), nil
	case OpDelete:
		if _, err := s.store.deleteDatabase(req.Database); err != nil {
			return nil, err
		}
		return &Response{Status: http.StatusNoContent, Header: http.Header{}, RequestCharge: 1}, nil
	}
	return nil, methodNotAllowed()
}

// createDatabase creates a database from its resource body ({"id": ...})
// with the dedicated throughput manual or auto ask for (see
// throughputFor): the one create path behind the data plane's POST /dbs
// and ARM's PUT of an sqlDatabase.
func (s *Server) createDatabase(body map[string]any, manual, auto string) (*database, *apiError) {
	id, err := validateName(body["id"])
	if err != nil {
		return nil, err
	}
	tp, err := s.throughputFor(manual, auto, "database")
	if err != nil {
		return nil, err
	}
	db, err := s.store.createDatabase(id)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		s.store.createOffer(tp, "dbs/"+db.rid+"/", db.rid, func(id string) { db.offerID = id })
	}
	return db, nil
}

// createContainer creates a container in db from its resource body (id,
// partitionKey, indexingPolicy, defaultTtl, ...) with the dedicated
// throughput manual or auto ask for (see throughputFor): the one create
// path behind the data plane's POST /dbs/{db}/colls and ARM's PUT of a
// container.
func (s *Server) createContainer(db *database, body map[string]any, manual, auto string) (*container, *apiError) {
	id, err := validateName(body["id"])
	if err != nil {
		return nil, err
	}
	def, err := parsePKDefinition(body["partitionKey"])
	if err != nil {
		return nil, err
	}
	props := containerProps(body)
	ttl, err := parseDefaultTTL(props)
	if err != nil {
		return nil, err
	}
	tp, err := s.throughputFor(manual, auto, "container")
	if err != nil {
		return nil, err
	}
	c, err := s.store.createContainer(db, id, props, def, ttl)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		s.store.createOffer(tp, "dbs/"+db.rid+"/colls/"+c.rid+"/", c.rid, func(id string) {
			c.mu.Lock()
			c.offerID = id
			c.mu.Unlock()
		})
	}
	s.log.Debug("cosmosemu: container created")
	return c, nil
}

// replaceContainer replaces c's settable properties (indexing policy,
// defaultTtl, ...) with those of body, whose id must be c's and whose
// partition key must be c's; ifMatch, when neither empty nor "*", must be
// c's etag. The data plane's PUT of a container and ARM's PUT of an
// existing one both replace through it.
func (s *Server) replaceContainer(c *container, body map[string]any, ifMatch string) *apiError {
	if id, _ := body["id"].(string); id != c.id {
		return errBadRequest("The id of the container in the body does not match the id in the request path.")
	}
	def, err := parsePKDefinition(body["partitionKey"])
	if err != nil {
		return err
	}
	props := containerProps(body)
	ttl, err := parseDefaultTTL(props)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.Join(def.Paths, ",") != strings.Join(c.pkDef.Paths, ",") || def.Kind != c.pkDef.Kind {
		return errBadRequest("Document collection partition key cannot be changed.")
	}
	if ifMatch != "" && ifMatch != "*" && ifMatch != c.etag {
		return errPrecondition()
	}
	c.props = props
	c.policy = parseIndexPolicy(c.props)
	c.ttl.Store(ttl)
	c.etag = s.store.newETag()
	c.ts = s.store.now()
	return nil
}

// defaultIndexingPolicy is what the service stores when none is given.
func defaultIndexingPolicy() map[string]any {
	return map[string]any{
		"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/*"}},
		"excludedPaths": []any{map[string]any{"path": "/\"_etag\"/?"}},
	}
}

// containerProps keeps the user-settable container properties of a body.
func containerProps(body map[string]any) map[string]any {
	props := map[string]any{}
	for k, v := range body {
		switch k {
		case "id", "partitionKey", "_rid", "_self", "_etag", "_ts", "_docs", "_sprocs", "_triggers", "_udfs", "_conflicts":
			continue
		}
		props[k] = v
	}
	if _, ok := props["indexingPolicy"]; !ok {
		props["indexingPolicy"] = defaultIndexingPolicy()
	} else if ip, ok := props["indexingPolicy"].(map[string]any); ok {
		if _, ok := ip["indexingMode"]; !ok {
			ip["indexingMode"] = "consistent"
		}
		if s, ok := ip["indexingMode"].(string); ok {
			ip["indexingMode"] = strings.ToLower(s)
		}
	}
	if _, ok := props["conflictResolutionPolicy"]; !ok {
		props["conflictResolutionPolicy"] = map[string]any{"mode": "LastWriterWins", "conflictResolutionPath": "/_ts", "conflictResolutionProcedure": ""}
	}
	if _, ok := props["geospatialConfig"]; !ok {
		props["geospatialConfig"] = map[string]any{"type": "Geography"}
	}
	return props
}

func (s *Server) handleContainer(req *Request) (*Response, *apiError) {
	db := s.store.database(req.Database)
	if db == nil {
		return nil, errNotFound()
	}
	switch req.Operation {
	case OpReadFeed, OpQuery:
		var items []map[string]any
		for _, c := range db.listContainers() {
			items = append(items, c.toJSON())
		}
		out, err := s.filterResources(req, items)
		if err != nil {
			return nil, err
		}
		return feedResponse(db.rid, "DocumentCollections", out), nil
	case OpCreate:
		body, err := parseDocument(req.body)
		if err != nil {
			return nil, err
		}
		h := req.HTTP.Header
		c, err := s.createContainer(db, body, h.Get(headerOfferThroughput), h.Get(headerAutopilot))
		if err != nil {
			return nil, err
		}
		return marshalResource(http.StatusCreated, c.toJSON(), c.etag), nil
	case OpRead:
		c, err := s.store.container(req.Database, req.Container)
		if err != nil {
			return nil, err
		}
		j := c.toJSON()
		return marshalResource(http.StatusOK, j, j["_etag"].(string)), nil
	case OpReplace:
		c, err := s.store.container(req.Database, req.Container)
		if err != nil {
			return nil, err
		}
		body, err := parseDocument(req.body)
		if err != nil {
			return nil, err
		}
		if err := s.replaceContainer(c, body, req.HTTP.Header.Get("If-Match")); err != nil {
			return nil, err
		}
		j := c.toJSON()
		return marshalResource(http.StatusOK, j, j["_etag"].(string)), nil
	case OpDelete:
		if _, err := s.store.deleteContainer(db, req.Container); err != nil {
			return nil, err
		}
		return &Response{Status: http.StatusNoContent, Header: http.Header{}, RequestCharge: 1}, nil
	}
	return nil, methodNotAllowed()
}
