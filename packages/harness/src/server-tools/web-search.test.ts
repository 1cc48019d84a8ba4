import { describe, expect, it } from "vitest";
import { tavilyCountry, webSearchProviderFromEnv } from "./tavily.ts";
import { hitAllowed, webSearchConfig } from "./web-search.ts";

const hit = (url: string) => ({ url, title: "t", content: "c" });

describe("web_search domain lists", () => {
  it("matches a domain and its subdomains, not look-alikes", () => {
    const allowed = { allowedDomains: ["example.com"], blockedDomains: null };
    expect(hitAllowed(hit("https://example.com/a"), allowed)).toBe(true);
    expect(hitAllowed(hit("https://docs.example.com/a"), allowed)).toBe(true);
    expect(hitAllowed(hit("https://notexample.com/a"), allowed)).toBe(false);
    expect(hitAllowed(hit("https://example.com.evil.net/a"), allowed)).toBe(false);
  });

  it("honours a path suffix on an entry", () => {
    const allowed = { allowedDomains: ["example.com/docs"], blockedDomains: null };
    expect(hitAllowed(hit("https://example.com/docs"), allowed)).toBe(true);
    expect(hitAllowed(hit("https://example.com/docs/x"), allowed)).toBe(true);
    expect(hitAllowed(hit("https://example.com/docsx"), allowed)).toBe(false);
    expect(hitAllowed(hit("https://example.com/blog"), allowed)).toBe(false);
  });

  it("drops blocked hosts and anything that is not an http(s) URL", () => {
    const blocked = { allowedDomains: null, blockedDomains: ["ads.example.com"] };
    expect(hitAllowed(hit("https://ads.example.com/x"), blocked)).toBe(false);
    expect(hitAllowed(hit("https://www.example.com/x"), blocked)).toBe(true);
    expect(hitAllowed(hit("javascript:alert(1)"), blocked)).toBe(false);
    expect(hitAllowed(hit("not a url"), blocked)).toBe(false);
  });
});

describe("web_search config", () => {
  it("is off without a toolset, on by default in one, and off when its entry cannot be read", () => {
    expect(webSearchConfig({ tools: [] }).enabled).toBe(false);
    expect(webSearchConfig({ tools: [{ type: "agent_toolset_20260401" }] }).enabled).toBe(true);
    const unreadable = { tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_search", allowed_domains: "x" }] }] };
    expect(webSearchConfig(unreadable).enabled).toBe(false);
  });
});

describe("the Tavily provider's settings", () => {
  it("maps an ISO country code to Tavily's country name", () => {
    expect(tavilyCountry("US")).toBe("united states");
    expect(tavilyCountry("gb")).toBe("united kingdom");
    expect(tavilyCountry("ZZ")).toBeUndefined();
    expect(tavilyCountry("QQ")).toBeUndefined();
    expect(tavilyCountry("USA")).toBeUndefined();
  });

  it("is selected by OPENMA_WEB_SEARCH_PROVIDER and needs its key", () => {
    expect(webSearchProviderFromEnv({})).toBeNull();
    expect(webSearchProviderFromEnv({ OPENMA_WEB_SEARCH_PROVIDER: "tavily", TAVILY_API_KEY: "k" })?.name).toBe("tavily");
    expect(() => webSearchProviderFromEnv({ OPENMA_WEB_SEARCH_PROVIDER: "tavily" })).toThrow(/TAVILY_API_KEY/);
    expect(() => webSearchProviderFromEnv({ OPENMA_WEB_SEARCH_PROVIDER: "bing", TAVILY_API_KEY: "k" })).toThrow(/unknown search provider/);
  });
});
