metadata name = 'durafeed service app'
metadata description = 'The Container Apps environment, its diagnostic settings, and the durafeed service as a container app running under a user-assigned managed identity, which pulls its image once AcrPull is in place.'

@description('Required. Name of the container app: 2 to 32 lowercase letters, digits and hyphens.')
@minLength(2)
@maxLength(32)
param name string

@description('Required. Name of the Container Apps environment.')
@minLength(2)
@maxLength(60)
param environmentName string

@description('Optional. Location of the environment and the app.')
param location string = resourceGroup().location

@description('Optional. Tags of the environment and the app.')
param tags object = {}

@description('Required. Resource id of the Log Analytics workspace receiving the environment\'s logs and metrics.')
param logAnalyticsWorkspaceResourceId string

@description('Required. The service\'s image reference (registry/repository:tag or @digest).')
param containerImage string

@description('Optional. Name of an Azure container registry in this resource group the image is pulled from with the identity, which gets AcrPull on it before the app is created; empty for a public image.')
param containerRegistryName string = ''

@description('Required. Resource id of the user-assigned managed identity the app runs under and pulls its image with.')
param identityResourceId string

@description('Required. Client id of that identity, handed to the service as AZURE_CLIENT_ID.')
param identityClientId string

@description('Required. Principal (object) id of that identity, granted AcrPull when containerRegistryName is set.')
param identityPrincipalId string

@description('Required. The Cosmos DB account endpoint.')
param cosmosEndpoint string

@description('Required. The database name.')
param databaseName string

@description('Required. The container name.')
param containerName string

@description('Optional. The service\'s mode: event-driven (change feed) or polling.')
@allowed([
  'event-driven'
  'polling'
])
param mode string = 'event-driven'

@description('Optional. The service\'s log level.')
@allowed([
  'debug'
  'info'
  'warn'
  'error'
])
param logLevel string = 'info'

@description('Optional. Seconds the service takes to stop on SIGTERM: it stops being ready, drains requests and turns, and hands its leases over. The platform waits 5 s more before SIGKILL.')
@minValue(5)
@maxValue(595)
param shutdownGraceSeconds int = 25

@description('Optional. Fewest replicas. Two or more keep the change-feed leases served while one restarts.')
@minValue(2)
@maxValue(1000)
param minReplicas int = 2

@description('Optional. Most replicas.')
@minValue(2)
@maxValue(1000)
param maxReplicas int = 10

@description('Optional. Concurrent HTTP requests per replica above which the app scales out.')
@minValue(1)
param httpConcurrentRequests int = 50

@description('Optional. CPU cores per replica (0.25 to 4, as a string: 0.5).')
param cpu string = '0.5'

@description('Optional. Memory per replica: 2 GiB per core (1Gi for 0.5 cores).')
param memory string = '1Gi'

@description('Optional. Whether the environment spreads replicas over availability zones; needs infrastructureSubnetId. Set when the environment is created only.')
param zoneRedundant bool = false

@description('Optional. Resource id of the subnet the environment joins (/27 or larger, delegated to Microsoft.App/environments); empty: a network Azure manages. Set when the environment is created only.')
param infrastructureSubnetId string = ''

@description('Optional. Whether the ingress accepts requests from the internet. It does only when authTenantId and authAudience are set too; otherwise it stays internal (reachable from inside the environment only).')
param ingressExternal bool = false

@description('Optional. The Entra ID tenant of the tokens the service accepts (DURAFEED_AUTH_TENANT_ID); empty: none.')
param authTenantId string = ''

@description('Optional. The audience of the tokens the service accepts (DURAFEED_AUTH_AUDIENCE); empty: none.')
param authAudience string = ''

// Without authentication the service answers on :8080 only when told so
// (DURAFEED_AUTH=none): the ingress is then internal, reachable from
// inside the environment only.
var authOptOut = (empty(authTenantId) || empty(authAudience)) ? 'none' : ''

// The API is never open to the internet: external only with authentication.
var ingressIsExternal = ingressExternal && !empty(authTenantId) && !empty(authAudience)

resource environment 'Microsoft.App/managedEnvironments@2025-07-01' = {
  name: environmentName
  location: location
  tags: tags
  properties: {
    // Logs go to Azure Monitor and on to the workspace through the
    // diagnostic setting below: no workspace key is handed out.
    appLogsConfiguration: {
      destination: 'azure-monitor'
    }
    workloadProfiles: [
      {
        name: 'Consumption'
        workloadProfileType: 'Consumption'
      }
    ]
    // Zone redundancy needs the environment in a virtual network.
    zoneRedundant: zoneRedundant
    vnetConfiguration: empty(infrastructureSubnetId) ? null : { infrastructureSubnetId: infrastructureSubnetId }
    // Traffic inside the environment is encrypted (platform certificates).
    peerTrafficConfiguration: {
      encryption: {
        enabled: true
      }
    }
  }
}

resource environmentDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: environment
  properties: {
    workspaceId: logAnalyticsWorkspaceResourceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

module registryAccess 'registry-access.bicep' = if (!empty(containerRegistryName)) {
  name: '${deployment().name}-registry-access'
  params: {
    containerRegistryName: containerRegistryName
    principalId: identityPrincipalId
  }
}

resource app 'Microsoft.App/containerApps@2025-07-01' = {
  name: name
  location: location
  tags: tags
  // The first revision pulls the image as the user-assigned identity as soon
  // as the app exists, so AcrPull is assigned first
  // (microsoft/azure-container-apps#646). Explicit, not left to the
  // reference to the registry's login server below.
  #disable-next-line no-unnecessary-dependson
  dependsOn: [
    registryAccess
  ]
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityResourceId}': {}
    }
  }
  properties: {
    environmentId: environment.id
    workloadProfileName: 'Consumption'
    configuration: {
      activeRevisionsMode: 'Single'
      ingress: {
        external: ingressIsExternal
        targetPort: 8080
        transport: 'http'
        allowInsecure: false
      }
      registries: empty(containerRegistryName) ? [] : [{ server: registryAccess!.outputs.loginServer, identity: identityResourceId }]
    }
    template: {
      // The platform's SIGTERM-to-SIGKILL wait: the service's own grace
      // period plus a margin, so it exits on its own.
      terminationGracePeriodSeconds: shutdownGraceSeconds + 5
      containers: [
        {
          name: 'durafeed-service'
          image: containerImage
          resources: {
            cpu: json(cpu)
            memory: memory
          }
          // Every name here is one the service reads (a Go test checks).
          env: [
            {
              name: 'AZURE_CLIENT_ID'
              value: identityClientId
            }
            {
              name: 'COSMOS_ENDPOINT'
              value: cosmosEndpoint
            }
            {
              name: 'COSMOS_DATABASE'
              value: databaseName
            }
            {
              name: 'COSMOS_CONTAINER'
              value: containerName
            }
            {
              name: 'DURAFEED_LISTEN'
              value: ':8080'
            }
            {
              name: 'DURAFEED_MODE'
              value: mode
            }
            {
              name: 'DURAFEED_LOG_LEVEL'
              value: logLevel
            }
            {
              name: 'DURAFEED_GRACE'
              value: '${shutdownGraceSeconds}s'
            }
            // Empty when authentication is off.
            {
              name: 'DURAFEED_AUTH_TENANT_ID'
              value: authTenantId
            }
            {
              name: 'DURAFEED_AUTH_AUDIENCE'
              value: authAudience
            }
            {
              name: 'DURAFEED_AUTH'
              value: authOptOut
            }
          ]
          probes: [
            {
              type: 'Liveness'
              httpGet: {
                path: '/healthz'
                port: 8080
              }
              periodSeconds: 10
              failureThreshold: 3
            }
            // Ready once it has joined the change-feed lease set; not ready
            // from SIGTERM on, so ingress stops sending requests first.
            {
              type: 'Readiness'
              httpGet: {
                path: '/readyz'
                port: 8080
              }
              periodSeconds: 2
              failureThreshold: 2
            }
          ]
        }
      ]
      scale: {
        minReplicas: minReplicas
        maxReplicas: maxReplicas
        rules: [
          {
            name: 'http-concurrency'
            http: {
              metadata: {
                concurrentRequests: string(httpConcurrentRequests)
              }
            }
          }
        ]
      }
    }
  }
}

@description('The resource id of the app.')
output resourceId string = app.id

@description('The name of the app.')
output name string = app.name

@description('The app\'s host name: internal (reachable from inside the environment) unless the ingress is external.')
output fqdn string = app.properties.configuration.ingress.fqdn

@description('The resource id of the environment.')
output environmentResourceId string = environment.id
