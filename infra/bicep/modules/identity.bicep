metadata name = 'durafeed service identity'
metadata description = 'The user-assigned managed identity the service authenticates to Azure Cosmos DB with.'

@description('Required. Name of the user-assigned managed identity.')
@minLength(3)
@maxLength(128)
param name string

@description('Optional. Location of the identity.')
param location string = resourceGroup().location

@description('Optional. Tags of the identity.')
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: name
  location: location
  tags: tags
}

@description('The resource id of the identity.')
output resourceId string = identity.id

@description('The name of the identity.')
output name string = identity.name

@description('The client (application) id of the identity: the service\'s AZURE_CLIENT_ID.')
output clientId string = identity.properties.clientId

@description('The principal (object) id of the identity: the subject of its role assignments.')
output principalId string = identity.properties.principalId
