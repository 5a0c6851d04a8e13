metadata name = 'durafeed service app'
metadata description = 'The Container Apps environment, its diagnostic settings, and the durafeed service as a container app running under a user-assigned managed identity.'

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

@description('Optional. The login server of the registry the image is pulled from with the identity; empty for a public image.')
param registryServer string = ''

@description('Required. Resource id of the user-assigned managed identity the app runs under.')
param identityResourceId string

@description('Required. Client id of that identity, handed to the service as AZURE_CLIENT_ID.')
param identityClientId string

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

resource app 'Microsoft.App/containerApps@2025-07-01' = {
  name: name
  location: location
  tags: tags
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
        external: true
        targetPort: 8080
        transport: 'http'
        allowInsecure: false
      }
      registries: empty(registryServer) ? [] : [{ server: registryServer, identity: identityResourceId }]
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

@description('The app\'s public host name.')
output fqdn string = app.properties.configuration.ingress.fqdn

@description('The resource id of the environment.')
output environmentResourceId string = environment.id
