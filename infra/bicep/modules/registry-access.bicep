metadata name = 'durafeed image pull'
metadata description = 'Lets the service identity pull images from an Azure container registry of the same resource group (AcrPull on that registry only).'

@description('Required. Name of the container registry, in this resource group.')
@minLength(5)
@maxLength(50)
param containerRegistryName string

@description('Required. Principal (object) id of the identity that pulls.')
param principalId string

// AcrPull, a built-in Azure role.
var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' existing = {
  name: containerRegistryName
}

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(registry.id, principalId, acrPullRoleId)
  scope: registry
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

@description('The registry\'s login server, for the container app\'s registry settings.')
output loginServer string = registry.properties.loginServer
