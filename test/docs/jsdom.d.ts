/**
 * The one part of jsdom the diagram test uses. jsdom ships no types, and @types/jsdom would put the DOM's
 * global types into every file of the project (which runs on Node, where they do not exist).
 */
declare module 'jsdom' {
  export class JSDOM {
    constructor(html: string)
    readonly window: object
  }
}
