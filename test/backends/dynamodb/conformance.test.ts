import { defineConformanceSuite } from '../../conformance/suite.js'
import { dynamodbKit } from '../../kits/dynamodb.js'

// The shared suite on the real DynamoDB Local (Amazon's jar), its tables kept across restarts.
defineConformanceSuite(dynamodbKit)
