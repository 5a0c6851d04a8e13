metadata name = 'durafeed on Azure'
metadata description = 'The durafeed service on Azure Container Apps over Azure Cosmos DB for NoSQL. Keys are off: the service reaches Cosmos DB as a user-assigned managed identity holding Cosmos DB Built-in Data Contributor on its one container. See README, "Deploy to Azure".'

targetScope = 'resourceGroup'

@description('Optional. Base of every resource name (lowercase letters, digits and hyphens); the resources are named cosmos-<name>, id-<name>, log-<name>, cae-<name> and ca-<name>.')
@minLength(3)
@maxLength(29)
param name string = 'durafeed-${uniqueString(resourceGroup().id)}'

@description('Optional. Location of every resource.')
param location string = resourceGroup().location

@description('Optional. Tags of every resource.')
param tags object = {}

@description('Required. The service\'s image: registry/repository:tag or @digest (make image builds it; README says how to push it).')
param containerImage string

@description('Optional. Name of an Azure container registry in this resource group holding the image. When set, the identity gets AcrPull on it and the app pulls with the identity; leave it empty for a public image.')
param containerRegistryName string = ''

@description('Optional. Name of the database.')
param databaseName string = 'durafeed'

@description('Optional. Name of the container.')
param containerName string = 'durafeed'

@description('Optional. Serverless or Autoscale throughput for Cosmos DB.')
@allowed([
  'Serverless'
  'Autoscale'
])
param throughputMode string = 'Serverless'

@description('Optional. The container\'s maximum RU/s when throughputMode is Autoscale.')
@minValue(1000)
param autoscaleMaxThroughput int = 1000

@description('Optional. Whether Cosmos DB accepts requests from public networks (Disabled needs a private endpoint, not created here).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Principal (object) ids granted Cosmos DB Built-in Data Contributor on the container besides the service\'s identity, e.g. an operator\'s user.')
param additionalDataContributorPrincipalIds array = []

@description('Optional. The service\'s mode.')
@allowed([
  'event-driven'
  'polling'
])
param mode string = 'event-driven'

@description('Optional. Fewest service replicas (two or more).')
@minValue(2)
@maxValue(1000)
param minReplicas int = 2

@description('Optional. Most service replicas.')
@minValue(2)
@maxValue(1000)
param maxReplicas int = 10

@description('Optional. Concurrent HTTP requests per replica above which the service scales out.')
@minValue(1)
param httpConcurrentRequests int = 50

@description('Optional. Seconds the service takes to stop on SIGTERM.')
@minValue(5)
@maxValue(595)
param shutdownGraceSeconds int = 25

@description('Optional. Days Log Analytics keeps the logs.')
@minValue(30)
@maxValue(730)
param logRetentionInDays int = 30

@description('Optional. Cosmos DB continuous backup: point-in-time restore over 30 days (billed per GB) or 7 days (free).')
@allowed([
  'Continuous7Days'
  'Continuous30Days'
])
param continuousBackupTier string = 'Continuous30Days'

@description('Optional. Spread Cosmos DB and the Container Apps environment over availability zones: needs a region with zones and infrastructureSubnetId (the deployment fails without it). Both resources take it when created only.')
param zoneRedundant bool = false

@description('Optional. Resource id of a subnet (/27 or larger, delegated to Microsoft.App/environments, used by nothing else) the Container Apps environment joins; required by zoneRedundant. Taken when the environment is created only.')
param infrastructureSubnetId string = ''

@description('Optional. Accept requests from the internet. Needs authTenantId and authAudience (the deployment fails without them: no open API); by default the ingress is internal, reachable from inside the Container Apps environment only.')
param ingressExternal bool = false

@description('Optional. Entra ID tenant of the tokens the service accepts (DURAFEED_AUTH_TENANT_ID); empty: no authentication.')
param authTenantId string = ''

@description('Optional. Audience of the tokens the service accepts (DURAFEED_AUTH_AUDIENCE); empty: no authentication.')
param authAudience string = ''

// One switch for both: Cosmos DB's region and the Container Apps
// environment, which is zone redundant only in a virtual network.
var zoneRedundantChecked = zoneRedundant ? (empty(infrastructureSubnetId) ? fail('zoneRedundant needs infrastructureSubnetId: a Container Apps environment is zone redundant only in a virtual network.') : true) : false

// External ingress only with authentication: asking for it without fails.
var ingressExternalChecked = ingressExternal ? (!empty(authTenantId) && !empty(authAudience) ? true : fail('ingressExternal needs authTenantId and authAudience: without them the API would be open to the internet.')) : false

module identity 'modules/identity.bicep' = {
  name: '${deployment().name}-identity'
  params: {
    name: 'id-${name}'
    location: location
    tags: tags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: '${deployment().name}-monitoring'
  params: {
    name: 'log-${name}'
    location: location
    tags: tags
    retentionInDays: logRetentionInDays
  }
}

module cosmos 'modules/cosmos.bicep' = {
  name: '${deployment().name}-cosmos'
  params: {
    name: 'cosmos-${name}'
    location: location
    tags: tags
    databaseName: databaseName
    containerName: containerName
    throughputMode: throughputMode
    autoscaleMaxThroughput: autoscaleMaxThroughput
    publicNetworkAccess: publicNetworkAccess
    zoneRedundant: zoneRedundantChecked
    continuousBackupTier: continuousBackupTier
    dataContributorPrincipalIds: concat([identity.outputs.principalId], additionalDataContributorPrincipalIds)
  }
}

module app 'modules/app.bicep' = {
  name: '${deployment().name}-app'
  params: {
    name: 'ca-${name}'
    environmentName: 'cae-${name}'
    location: location
    tags: tags
    logAnalyticsWorkspaceResourceId: monitoring.outputs.resourceId
    containerImage: containerImage
    containerRegistryName: containerRegistryName
    identityResourceId: identity.outputs.resourceId
    identityClientId: identity.outputs.clientId
    identityPrincipalId: identity.outputs.principalId
    cosmosEndpoint: cosmos.outputs.endpoint
    databaseName: cosmos.outputs.databaseName
    containerName: cosmos.outputs.containerName
    mode: mode
    shutdownGraceSeconds: shutdownGraceSeconds
    minReplicas: minReplicas
    maxReplicas: maxReplicas
    httpConcurrentRequests: httpConcurrentRequests
    zoneRedundant: zoneRedundantChecked
    infrastructureSubnetId: infrastructureSubnetId
    ingressExternal: ingressExternalChecked
    authTenantId: authTenantId
    authAudience: authAudience
  }
}

@description('The Cosmos DB account endpoint (COSMOS_ENDPOINT).')
output cosmosEndpoint string = cosmos.outputs.endpoint

@description('The client id of the service\'s managed identity (AZURE_CLIENT_ID).')
output identityClientId string = identity.outputs.clientId

@description('The principal id of the service\'s managed identity.')
output identityPrincipalId string = identity.outputs.principalId

@description('The service\'s URL: reachable from inside the Container Apps environment only, unless ingressExternal.')
output appUrl string = 'https://${app.outputs.fqdn}'

@description('The name of the container app.')
output appName string = app.outputs.name

@description('The name of the Cosmos DB account.')
output cosmosAccountName string = cosmos.outputs.name
