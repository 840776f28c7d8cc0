// Part 3 of the short chaos run of CI (test/chaos/short.ts deals the runs into parts for the runner's lanes).
import { defineShortChaos } from './short.js'

defineShortChaos(3)
