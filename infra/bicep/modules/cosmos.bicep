metadata name = 'durafeed store'
metadata description = 'The Azure Cosmos DB for NoSQL account, database and container of a durafeed deployment, with key (local) authorization off and a data-plane role assignment scoped to the one container the service uses.'

@description('Required. Name of the Cosmos DB account: 3 to 44 lowercase letters, digits and hyphens, unique across Azure.')
@minLength(3)
@maxLength(44)
param name string

@description('Optional. Location of the account (its only region).')
param location string = resourceGroup().location

@description('Optional. Tags of the account.')
param tags object = {}

@description('Optional. Name of the database.')
param databaseName string = 'durafeed'

@description('Optional. Name of the container. Its shape is the provider\'s own (store.ContainerProperties); a Go test keeps the two equal.')
param containerName string = 'durafeed'

@description('Optional. Serverless (billed per request unit consumed) or Autoscale (provisioned throughput on the container, scaling between a tenth of autoscaleMaxThroughput and it).')
@allowed([
  'Serverless'
  'Autoscale'
])
param throughputMode string = 'Serverless'

@description('Optional. The container\'s maximum throughput in RU/s when throughputMode is Autoscale.')
@minValue(1000)
param autoscaleMaxThroughput int = 1000

@description('Optional. Whether the account accepts requests from public networks. Disabled needs a private endpoint and a virtual network, which this template does not create.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Whether the account\'s region spreads its replicas over availability zones (the region must have zones). Set when the account is created: it cannot be changed on an existing region.')
param zoneRedundant bool = false

@description('Optional. How far back point-in-time restore reaches: continuous backup of 30 days (billed per GB) or 7 days (free). The tier can be switched later; continuous backup cannot be turned back to periodic.')
@allowed([
  'Continuous7Days'
  'Continuous30Days'
])
param continuousBackupTier string = 'Continuous30Days'

@description('Required. Principal (object) ids granted Cosmos DB Built-in Data Contributor on the container, and on nothing wider.')
param dataContributorPrincipalIds array

// Cosmos DB Built-in Data Contributor: read metadata, and every item
// operation, query and change feed read.
var dataContributorRoleId = '00000000-0000-0000-0000-000000000002'

resource account 'Microsoft.DocumentDB/databaseAccounts@2025-04-15' = {
  name: name
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: zoneRedundant
      }
    ]
    capabilities: throughputMode == 'Serverless' ? [{ name: 'EnableServerless' }] : []
    // Point-in-time restore, to a new account, of any second in the tier's
    // window; as Azure Verified Modules default to.
    backupPolicy: {
      type: 'Continuous'
      continuousModeProperties: {
        tier: continuousBackupTier
      }
    }
    // Entra ID only: keys are refused, and so are metadata writes (database
    // and container changes) through the data plane.
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    publicNetworkAccess: publicNetworkAccess
    minimalTlsVersion: 'Tls12'
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2025-04-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
  }
}

resource container 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2025-04-15' = {
  parent: database
  name: containerName
  properties: {
    resource: {
      id: containerName
      partitionKey: {
        paths: [
          '/instanceId'
        ]
        kind: 'Hash'
        version: 2
      }
      // Time to live on with no default: only request records, which
      // carry a ttl, expire.
      defaultTtl: -1
      // Only the paths the provider's queries filter or sort on.
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
          includedPaths: [
            {
              path: '/type/?'
            }
            {
              path: '/instanceId/?'
            }
            {
              path: '/dispatchSlot/?'
            }
            {
              path: '/visibleAt/?'
            }
            {
              path: '/enqueuedAt/?'
            }
            {
              path: '/lockedUntil/?'
            }
            {
              path: '/executionId/?'
            }
            {
              path: '/eventId/?'
            }
            {
              path: '/status/?'
            }
            {
              path: '/sessionId/?'
            }
            {
              path: '/ownerId/?'
            }
            {
              path: '/parentInstanceId/?'
            }
            {
              path: '/createdAt/?'
            }
            {
              path: '/customStatusVersion/?'
            }
            {
              path: '/tag/?'
            }
            {
              path: '/lockToken/?'
            }
            {
              path: '/stagedBy/?'
            }
            {
              path: '/lockOwner/?'
            }
            {
              path: '/deleting/?'
            }
            {
              path: '/deletingAt/?'
            }
            {
              path: '/publish/*'
            }
            {
              path: '/publish/at/?'
            }
            {
              path: '/lastActivity/?'
            }
            {
              path: '/activityId/?'
            }
            {
              path: '/pending/?'
            }
            {
              path: '/completedAt/?'
            }
            {
              path: '/orchestrationName/?'
            }
          ]
          // Payloads (event data, work items, outputs, custom status) and
          // everything not named above are never indexed.
          excludedPaths: [
            {
              path: '/eventData/*'
            }
            {
              path: '/workItem/*'
            }
            {
              path: '/payload/*'
            }
            {
              path: '/output/*'
            }
            {
              path: '/customStatus/*'
            }
            {
              path: '/*'
            }
          ]
          compositeIndexes: [
            [
              {
                path: '/type'
                order: 'ascending'
              }
              {
                path: '/dispatchSlot'
                order: 'ascending'
              }
              {
                path: '/visibleAt'
                order: 'ascending'
              }
              {
                path: '/enqueuedAt'
                order: 'ascending'
              }
            ]
            [
              {
                path: '/type'
                order: 'ascending'
              }
              {
                path: '/executionId'
                order: 'ascending'
              }
              {
                path: '/eventId'
                order: 'ascending'
              }
            ]
            [
              {
                path: '/type'
                order: 'ascending'
              }
              {
                path: '/status'
                order: 'ascending'
              }
            ]
          ]
      }
    }
    options: throughputMode == 'Autoscale' ? { autoscaleSettings: { maxThroughput: autoscaleMaxThroughput } } : {}
  }
}

// The service reads and writes one container, and the data-plane roles
// allow a container scope: the assignment names the container, not the
// database or the account. One at a time: the account refuses a role
// assignment written while another holds its lock (412, "another user
// operation in progress").
@batchSize(1)
resource dataContributor 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2025-04-15' = [
  for principalId in dataContributorPrincipalIds: {
    parent: account
    name: guid(container.id, dataContributorRoleId, principalId)
    properties: {
      roleDefinitionId: '${account.id}/sqlRoleDefinitions/${dataContributorRoleId}'
      principalId: principalId
      scope: '${account.id}/dbs/${database.name}/colls/${container.name}'
    }
  }
]

@description('The resource id of the account.')
output resourceId string = account.id

@description('The name of the account.')
output name string = account.name

@description('The account\'s endpoint: the service\'s COSMOS_ENDPOINT.')
output endpoint string = account.properties.documentEndpoint

@description('The name of the database: the service\'s COSMOS_DATABASE.')
output databaseName string = database.name

@description('The name of the container: the service\'s COSMOS_CONTAINER.')
output containerName string = container.name
