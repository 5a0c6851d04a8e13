metadata name = 'durafeed logs'
metadata description = 'The Log Analytics workspace the Container Apps environment sends its logs and metrics to.'

@description('Required. Name of the Log Analytics workspace.')
@minLength(4)
@maxLength(63)
param name string

@description('Optional. Location of the workspace.')
param location string = resourceGroup().location

@description('Optional. Tags of the workspace.')
param tags object = {}

@description('Optional. Days the workspace keeps data.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

resource workspace 'Microsoft.OperationalInsights/workspaces@2025-02-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    // Only Entra ID reaches the workspace: the environment sends its logs
    // through diagnostic settings, not with the workspace's shared key.
    features: {
      disableLocalAuth: true
    }
  }
}

@description('The resource id of the workspace.')
output resourceId string = workspace.id

@description('The name of the workspace.')
output name string = workspace.name
